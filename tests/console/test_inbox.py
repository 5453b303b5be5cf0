"""The inbox: every queue, oldest first, counts, and a fixed number of queries."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentops.selectors import QUEUE_LIMIT
from runtime import respond
from runtime.models import Event
from tests.console.conftest import World

# session, user, permissions (user's and groups', in one: agentops.backends); then the cursor and
# the kept counts (runs by status and pending interactions by kind, in one).
QUERIES_BEFORE_QUEUES = 5
# Then one per queue that has something in it: approvals, questions, blocked runs, retry waits.
INBOX_QUERIES = QUERIES_BEFORE_QUEUES + 4


def test_it_lists_every_kind_of_work_waiting_for_a_person(world, as_user):
    waiting = world.run("waiting")
    question = world.run("question")
    blocked = world.run("blocked")
    retrying = world.run("retry_wait")
    world.run("completed")
    html = as_user("viewer").get("/").content.decode()
    assert f'href="/interactions/{world.pending(waiting).pk}/"' in html
    assert f'href="/interactions/{world.pending(question).pk}/"' in html
    assert "Which order do you mean?" in html
    assert f'href="/runs/{blocked.pk}/reconcile/"' in html
    assert f"{blocked.pk}:step-1/tool/toolu_01_0" in html  # the operation id to look up
    assert "Uncertain operation" in html
    assert f'href="/runs/{retrying.pk}/"' in html
    assert "1 of 3" in html  # the attempt count
    assert "provider overloaded" in html
    assert "data-countdown" in html  # ticks client-side from next_attempt_at
    assert "data-when" in html  # the age of the oldest item in each queue


def test_it_counts_runs_by_status(world, as_user):
    world.run("waiting")
    world.run("waiting")
    world.run("failed")
    html = as_user("viewer").get("/").content.decode()
    counts = {
        status: int(n)
        for n, status in re.findall(r'<span class="n">(\d+)</span> ([a-z ]+)</a>', html)
    }
    assert counts == {
        "waiting": 2,
        "needs attention": 0,
        "retry wait": 0,
        "queued": 0,
        "running": 0,
        "paused": 0,
        "failed": 1,
    }


def test_it_lists_the_oldest_first(world, as_user):
    first = world.pending(world.run("waiting"))
    second = world.pending(world.run("waiting"))
    html = as_user("viewer").get("/").content.decode()
    assert html.index(f"/interactions/{first.pk}/") < html.index(f"/interactions/{second.pk}/")


def test_it_drops_answered_work(world, as_user):
    interaction = world.pending(world.run("waiting"))
    respond(interaction.pk, {"approved": True}, actor="bob")
    html = as_user("viewer").get("/").content.decode()
    assert f"/interactions/{interaction.pk}/" not in html
    assert "No tool call is waiting for approval." in html


def test_it_opens_a_live_socket_with_the_last_event_it_has_seen(world, as_user):
    world.run("waiting")
    last = Event.objects.order_by("-id").first()
    html = as_user("viewer").get("/").content.decode()
    assert 'ws-connect="/ws/inbox/"' in html
    assert f'<span id="live-cursor" data-event="{last.pk}" hidden></span>' in html


def fill(world: World, n: int) -> None:
    for _ in range(n):
        world.run("waiting")
        world.run("question")
        world.run("blocked")
        world.run("retry_wait")


def test_its_rows_render_no_template_and_reverse_no_url_of_their_own(world, as_user, rendering):
    client = as_user("operator")
    fill(world, 1)
    rendering(client, "/")  # the first request also warms what is kept per process
    one = rendering(client, "/")
    fill(world, 2)
    assert rendering(client, "/") == one


def test_it_reads_no_session_which_it_does_not_show(world, as_user):
    fill(world, 1)
    client = as_user("operator")
    with CaptureQueriesContext(connection) as captured:
        client.get("/")
    assert not [q["sql"] for q in captured.captured_queries if "agentops_session" in q["sql"]]


def test_it_reads_no_column_that_grows_with_a_run(world, as_user):
    """A run's transcript, a fork's seed, a message and an answer can each be long, and no
    queue shows them: read for every row of every queue, they were decoded for nothing."""
    fill(world, 2)
    client = as_user("operator")
    with CaptureQueriesContext(connection) as captured:
        html = client.get("/").content.decode()
    assert html.count('class="button small"') == 4 * 2
    read = " ".join(q["sql"] for q in captured.captured_queries)
    for column in ("transcript", "fork_context", "input", "output"):
        assert f'"agentops_run"."{column}"' not in read, column
    assert '"agentops_run"."attention_detail"' in read  # the blocked runs' queue shows it
    # An approval's or a question's row: of its run, what names the code and nothing else.
    queues = [q["sql"] for q in captured.captured_queries if '"agentops_workitem"' in q["sql"]]
    assert len(queues) == 2
    for sql in queues:
        selected = sql.split(" FROM ", 1)[0]
        assert set(re.findall(r'"agentops_run"\."(\w+)"', selected)) == {"id", "agent", "version"}


@pytest.mark.parametrize("n", [3, 30])
def test_it_builds_the_inbox_with_a_fixed_number_of_queries(
    world, as_user, django_assert_num_queries, n
):
    fill(world, n)
    client = as_user("operator")
    with django_assert_num_queries(INBOX_QUERIES):
        html = client.get("/").content.decode()
    # Each of the four queues lists at most QUEUE_LIMIT.
    assert html.count('class="button small"') == 4 * min(n, QUEUE_LIMIT)


@pytest.mark.parametrize(
    "states, queues",
    [
        ((), 0),
        (("waiting",), 1),
        (("question",), 1),
        (("blocked",), 1),
        (("retry_wait",), 1),
        (("waiting", "blocked"), 2),
    ],
    ids=["all-empty", "approvals", "questions", "attention", "retries", "two"],
)
def test_it_reads_no_queue_whose_kept_count_is_zero(
    world, as_user, django_assert_num_queries, states, queues
):
    world.run("completed")
    world.run("failed")  # counted, but in no queue
    for state in states:
        world.run(state)
    client = as_user("operator")
    with django_assert_num_queries(QUERIES_BEFORE_QUEUES + queues):
        html = client.get("/").content.decode()
    assert html.count('class="button small"') == len(states)
    empty = {
        "waiting": "No tool call is waiting for approval.",
        "question": "No agent is waiting for an answer.",
        "blocked": "No run is blocked.",
        "retry_wait": "No run is waiting to retry.",
    }
    for state, message in empty.items():
        assert (message in html) is (state not in states)

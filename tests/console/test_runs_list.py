"""The runs list: filters, search, keyset pages, and a fixed number of queries."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentops import selectors
from runtime import clock, submit
from runtime.models import Run
from tests.console.conftest import htmx

# session, user, permissions (user's and groups', in one: agentops.backends); then the known
# versions, one page, and the page's cost (one query for all its runs).
RUNS_QUERIES = 6


def listed(html: str) -> list[str]:
    return re.findall(r'<tr id="run-row-([0-9a-f-]+)">', html)


def test_it_lists_runs_newest_first(world, as_user):
    runs = [world.run("completed"), world.run("failed"), world.run("waiting")]
    html = as_user("viewer").get("/runs/").content.decode()
    assert listed(html) == [str(run.pk) for run in reversed(runs)]


def test_it_filters_by_status_agent_version_and_session(world, as_user):
    done = world.run("completed")
    failed = world.run("failed")
    waiting = world.run("waiting")
    client = as_user("viewer")
    assert listed(client.get("/runs/?status=failed").content.decode()) == [str(failed.pk)]
    assert listed(client.get("/runs/?agent=approvals").content.decode()) == [str(waiting.pk)]
    assert listed(client.get("/runs/?agent=approvals&version=2").content.decode()) == []
    session = f"/runs/?session={done.session_id}"
    assert listed(client.get(session).content.decode()) == [str(done.pk)]


def test_it_refuses_a_malformed_session_id_with_a_clear_message(world, as_user):
    response = as_user("viewer").get("/runs/?session=nope")
    assert response.status_code == 400
    assert "a session id is a UUID" in response.content.decode()


def test_it_refuses_an_unknown_status(world, as_user):
    response = as_user("viewer").get("/runs/?status=exploded")
    assert response.status_code == 400
    assert "Select a valid choice" in response.content.decode()


@pytest.mark.parametrize("how", ["run id", "prefix", "operation id", "session id", "session"])
def test_it_finds_a_run_by_its_ids_and_session(world, as_user, how):
    run = world.run("blocked")
    world.run("blocked")
    query = {
        "run id": str(run.pk),
        "prefix": str(run.pk)[:8],
        "operation id": f"{run.pk}:step-1/tool/toolu_01_0",
        "session id": str(run.session_id),
        "session": run.session.title,
    }[how]
    if how == "session":
        Run.objects.exclude(pk=run.pk).update(input="something else")
    html = as_user("viewer").get("/runs/", {"q": query}).content.decode()
    if how == "session":
        # Both sessions are titled after the same message: the title matches both.
        assert str(run.pk) in listed(html)
    else:
        assert listed(html) == [str(run.pk)]


def test_it_finds_text_inside_tool_arguments(world, as_user):
    run = world.run("blocked", "please")  # charge {"order_id": "A1", ...}
    pending = world.run("waiting", "please")  # refund {"order_id": "A1", ...}: an approval
    world.run("completed", "please")
    html = as_user("viewer").get("/runs/", {"q": "a1"}).content.decode()
    assert set(listed(html)) == {str(run.pk), str(pending.pk)}


def test_it_pages_with_cursors_without_counting(world, as_user, monkeypatch):
    monkeypatch.setattr(selectors, "PAGE_SIZE", 2)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    made = []
    for i in range(5):
        with clock.frozen(start + dt.timedelta(minutes=i)):
            made.append(str(submit("chatty", f"message {i}", actor="alice").pk))
    newest_first = list(reversed(made))
    client = as_user("viewer")
    first = client.get("/runs/").content.decode()
    assert listed(first) == newest_first[:2]
    older = re.search(r'href="\?before=([^"]+)" rel="next"', first).group(1)
    second = client.get(f"/runs/?before={older}").content.decode()
    assert listed(second) == newest_first[2:4]
    newer = re.search(r'href="\?after=([^"]+)" rel="prev"', second).group(1)
    assert listed(client.get(f"/runs/?after={newer}").content.decode()) == newest_first[:2]
    older = re.search(r'href="\?before=([^"]+)" rel="next"', second).group(1)
    third = client.get(f"/runs/?before={older}").content.decode()
    assert listed(third) == newest_first[4:]
    assert 'rel="next"' not in third


def test_it_keeps_the_filters_when_paging(world, as_user, monkeypatch):
    monkeypatch.setattr(selectors, "PAGE_SIZE", 1)
    world.run("failed")
    world.run("failed")
    html = as_user("viewer").get("/runs/?status=failed").content.decode()
    assert re.search(r'href="\?status=failed&amp;before=[^"]+" rel="next"', html)


def test_it_ignores_a_malformed_cursor(world, as_user):
    run = world.run("completed")
    assert listed(as_user("viewer").get("/runs/?before=garbage").content.decode()) == [str(run.pk)]


def test_it_swaps_only_the_table_for_htmx(world, as_user):
    world.run("completed")
    response = as_user("viewer").get("/runs/?status=completed", **htmx())
    html = response.content.decode()
    assert html.startswith('<div id="runs-table"')
    assert "<html" not in html
    assert "HX-Request" in response["Vary"]


def test_its_rows_render_no_template_and_reverse_no_url_of_their_own(world, as_user, rendering):
    client = as_user("operator")
    world.run("completed")
    rendering(client, "/runs/")  # the first request also warms what is kept per process
    one = rendering(client, "/runs/")
    for _ in range(5):
        world.run("completed")
    assert rendering(client, "/runs/") == one


def test_it_escapes_what_the_search_echoes(world, as_user):
    html = as_user("viewer").get("/runs/", {"q": '"><script>alert(1)</script>'}).content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&quot;&gt;&lt;script&gt;" in html


@pytest.mark.parametrize("n", [3, 30])
def test_it_lists_runs_with_a_fixed_number_of_queries(world, as_user, django_assert_num_queries, n):
    for _ in range(n):
        world.run("blocked")
    client = as_user("operator")
    with django_assert_num_queries(RUNS_QUERIES):
        html = client.get("/runs/").content.decode()
    assert len(listed(html)) == n
    # A search on PostgreSQL first reads how far the tool calls' text is folded (search_index).
    searched = RUNS_QUERIES + (connection.vendor == "postgresql")
    with django_assert_num_queries(searched):
        html = client.get("/runs/", {"q": "A1", "status": "needs_attention"}).content.decode()
    assert len(listed(html)) == n


def test_it_reads_no_column_that_grows_with_a_run(world, as_user):
    """A completed run's transcript holds every message it added, a fork's context its seed: a
    page of long runs read and decoded them all, though no row shows them."""
    world.run("completed")
    world.run("blocked")
    client = as_user("operator")
    with CaptureQueriesContext(connection) as captured:
        html = client.get("/runs/").content.decode()
    assert len(listed(html)) == 2
    (page,) = [q["sql"] for q in captured.captured_queries if "ORDER BY" in q["sql"]]
    for column in ("transcript", "fork_context", "attention_detail"):
        assert f'"agentops_run"."{column}"' not in page, column
    assert '"agentops_run"."input"' in page  # what a row shows is still read with the page

"""What the console says about the newer reasons a run stops: a crash loop, attempts that ran
out, a model that stopped without an answer, and whether the last model error can heal.

The engine leaves runs in these states; its tests show how. Here each state is forced onto a
real run, with the fields the engine writes (Run.attention_reason, attention_detail,
blocked_operation, crashed_claims, last_crash, error_kind), and the pages are read.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentops.selectors import QUEUE_LIMIT
from runtime.models import AttentionReason, Operation, Run, RunStatus
from tests.console.conftest import HOSTILE, World, htmx
from tests.console.test_inbox import QUERIES_BEFORE_QUEUES

KEY = "step-1/tool/toolu_01_0"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def stopped(run: Run, reason: str, **fields: Any) -> Run:
    """`run`, moved to needs_attention for `reason` as the engine would leave it."""
    Run.objects.filter(pk=run.pk).update(
        status=RunStatus.NEEDS_ATTENTION, attention_reason=reason, finished_at=None, **fields
    )
    run.refresh_from_db()
    return run


def crash_loop(world: World, crash: str = "RuntimeError: the payments client exploded") -> Run:
    return stopped(
        world.run("failed"),
        AttentionReason.CRASH_LOOP,
        crashed_claims=3,
        last_crash=crash,
        attention_detail={"message": "3 claims in a row ended in a crash"},
    )


def page(client, run: Run) -> str:
    response = client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def test_it_explains_a_crash_loop_with_its_last_crash(world, as_user):
    run = crash_loop(world)
    html = page(as_user("viewer"), run)
    assert "Crash loop: claims keep ending in a crash" in html
    assert "Its last 3 claims ended in a crash" in html
    assert "RuntimeError: the payments client exploded" in html
    assert "Find and fix the cause first" in html
    inbox = as_user("viewer").get("/").content.decode()
    assert "3 claims crashed; last: " in inbox
    assert "RuntimeError: the payments client exploded" in inbox


def test_a_crash_loop_retry_warns_that_the_cause_must_be_fixed_first(world, as_user):
    run = crash_loop(world)
    client = as_user("operator")
    html = page(client, run)
    warning = f'<p class="warning" id="retry-warning-{run.pk}">'
    assert (
        warning + "Retrying before the cause of the crashes is fixed only crashes it again." in html
    )
    assert f'aria-describedby="retry-warning-{run.pk}">Retry: the cause is fixed</button>' in html
    response = client.post(f"/runs/{run.pk}/retry/", **htmx())
    assert response.status_code == 200
    run.refresh_from_db()
    assert (run.status, run.crashed_claims, run.attention_reason) == (RunStatus.QUEUED, 0, "")
    assert run.last_crash == "RuntimeError: the payments client exploded"  # kept as history


def test_no_warning_on_an_ordinary_retry(world, as_user):
    html = page(as_user("operator"), world.run("failed"))
    assert "retry-warning" not in html
    assert ">Retry</button>" in html


def test_it_names_the_operation_whose_attempts_ran_out(world, as_user):
    run = stopped(
        world.run("blocked"),
        AttentionReason.ATTEMPTS_EXHAUSTED,
        attention_detail={"message": "charge was re-run after crashes too often"},
    )
    assert run.blocked_operation == KEY
    Operation.objects.filter(run=run, key=KEY).update(attempts=4)
    html = page(as_user("operator"), run)
    assert "An operation was re-run after crashes too often" in html
    assert f'<code>charge</code>, operation id <span class="mono">{run.pk}:{KEY}</span>' in html
    assert "was started 4 times" in html
    assert "Retry gives it a fresh budget" in html
    assert "Reconcile</a>" not in html  # not an uncertain outcome: nothing to reconcile
    inbox = as_user("operator").get("/").content.decode()
    assert f"<code>{KEY}</code> crashed on every re-run." in inbox


@pytest.mark.parametrize(
    ("detail", "says", "inbox_says"),
    [
        (
            {"stop_reason": "refusal"},
            "The model refused to continue (stop reason <code>refusal</code>).",
            "A retry will likely be refused again.",
        ),
        (
            {"stop_reason": "model_context_window_exceeded"},
            "The conversation no longer fits the model's context window",
            "It no longer fits: cancel, and continue in a new session.",
        ),
        (
            {"reason": "prompt_too_long", "message": "prompt is too long: 210000 tokens"},
            "Waiting or retrying will not make it fit",
            "It no longer fits: cancel, and continue in a new session.",
        ),
        (
            {"stop_reason": "max_tokens"},
            "The answer was cut off at the token limit",
            "Retry, or cancel.",
        ),
        (
            {"stop_reason": "something_new"},
            "The model ended the turn without an answer (stop reason <code>something_new</code>)",
            "Retry, or cancel.",
        ),
    ],
)
def test_it_explains_why_the_model_stopped_and_what_to_do(world, as_user, detail, says, inbox_says):
    run = stopped(world.run("failed"), AttentionReason.MODEL_STOPPED, attention_detail=detail)
    html = page(as_user("operator"), run)
    assert "The model ended the turn without an answer." in html  # the reason's label
    assert says in html
    assert ">Retry</button>" in html
    assert as_user("operator").get("/").content.decode().count(inbox_says) == 1


@pytest.mark.parametrize(
    ("kind", "on_the_page", "in_the_inbox"),
    [
        ("permanent", "A permanent error:</strong> waiting will not heal it", "permanent</span>"),
        ("transient", "A transient error:</strong>", "transient</span>"),
    ],
)
def test_it_says_whether_a_retry_wait_can_heal_by_waiting(
    world, as_user, kind, on_the_page, in_the_inbox
):
    run = world.run("retry_wait")
    Run.objects.filter(pk=run.pk).update(error_kind=kind)
    assert on_the_page in page(as_user("viewer"), run)
    inbox = as_user("viewer").get("/").content.decode()
    assert f'<span class="error-kind {kind}"' in inbox
    assert in_the_inbox in inbox


def test_it_says_a_failed_runs_permanent_error_will_fail_the_same_way(world, as_user):
    run = world.run("failed")
    Run.objects.filter(pk=run.pk).update(error_kind="permanent")
    html = page(as_user("operator"), run)
    assert "The last model error was permanent:" in html
    assert "fails the same way until its cause is fixed" in html


def test_it_says_nothing_of_an_error_kind_it_does_not_know(world, as_user):
    run = world.run("retry_wait")
    Run.objects.filter(pk=run.pk).update(error_kind="")  # as rows written before the field
    html = page(as_user("viewer"), run)
    assert "error-kind" not in html


def test_it_escapes_crashes_and_stop_reasons_the_world_controls(world, as_user):
    loop = crash_loop(world, crash=HOSTILE)
    model = stopped(
        world.run("failed"),
        AttentionReason.MODEL_STOPPED,
        attention_detail={"stop_reason": HOSTILE},
    )
    exhausted = stopped(
        world.run("failed"), AttentionReason.ATTEMPTS_EXHAUSTED, blocked_operation=HOSTILE[:200]
    )
    client = as_user("operator")
    for html in (
        *(page(client, run) for run in (loop, model, exhausted)),
        client.get("/").content.decode(),
    ):
        assert "<script>alert(1)" not in html
        assert "onerror=alert(2)>" not in html
        assert ESCAPED in html


@pytest.mark.parametrize("n", [3, 30])
def test_the_inbox_keeps_its_query_count_with_the_new_reasons(
    world, as_user, django_assert_num_queries, n
):
    for _ in range(n):
        crash_loop(world)
        stopped(
            world.run("failed"),
            AttentionReason.MODEL_STOPPED,
            attention_detail={"stop_reason": "refusal"},
        )
        stopped(world.run("blocked"), AttentionReason.ATTEMPTS_EXHAUSTED)
        Run.objects.filter(pk=world.run("retry_wait").pk).update(error_kind="permanent")
    client = as_user("operator")
    # Two queues have something in them, blocked runs and retry waits: the other two are not read.
    with django_assert_num_queries(QUERIES_BEFORE_QUEUES + 2):
        html = client.get("/").content.decode()
    # Three blocked runs and one retry wait per round; a queue lists at most QUEUE_LIMIT.
    assert html.count('class="button small"') == min(3 * n, QUEUE_LIMIT) + min(n, QUEUE_LIMIT)

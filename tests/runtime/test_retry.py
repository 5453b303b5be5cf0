"""Retry rules and persisted model retries with backoff."""

from __future__ import annotations

import datetime as dt

import pytest

from runtime import ModelRetry, RetryRejected, cancel, retry, submit
from runtime.clock import frozen
from runtime.llm.scripted import call, say
from runtime.models import (
    AttentionReason,
    Event,
    EventKind,
    Operation,
    OperationStatus,
    Run,
    RunStatus,
)
from runtime.testing import SimulatedCrash, crash_at, recover, run_until_idle
from tests.conftest import ARGS, make_agent, one_call
from tests.runtime.threads import at_once, won


class Flaky:
    """A script whose first `failures` model calls raise."""

    def __init__(self, failures: int, turns):
        self.failures, self.turns, self.calls = failures, turns, 0

    def __call__(self, request):
        self.calls += 1
        if self.calls <= self.failures:
            return RuntimeError(f"overloaded #{self.calls}")
        return self.turns[sum(1 for m in request.messages if m["role"] == "assistant")]


def test_it_fails_on_the_first_model_error_without_a_retry_policy(define):
    agent = define(make_agent(Flaky(1, [say("hi")])))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    assert run.status == RunStatus.FAILED
    assert "overloaded #1" in run.error


def test_it_waits_with_exponential_backoff_and_then_succeeds(define):
    policy = ModelRetry(max_attempts=3, initial_delay=2, max_delay=3, jitter=False)
    agent = define(make_agent(Flaky(2, [say("hi")]), model_retry=policy))
    with frozen(dt.datetime(2026, 1, 1, tzinfo=dt.UTC)) as clock:
        run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
        assert run.status == RunStatus.RETRY_WAIT
        assert run.next_attempt_at == dt.datetime(2026, 1, 1, 0, 0, 2, tzinfo=dt.UTC)
        assert run_until_idle(run.pk).status == RunStatus.RETRY_WAIT  # not due yet
        clock.advance(2)
        run = run_until_idle(run.pk)
        assert run.status == RunStatus.RETRY_WAIT
        assert run.next_attempt_at == dt.datetime(2026, 1, 1, 0, 0, 5, tzinfo=dt.UTC)  # capped: 3s
        clock.advance(3)
        run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert Operation.objects.get(run=run, key="step-1/model").attempts == 3
    assert Event.objects.filter(run=run, kind=EventKind.RETRY_SCHEDULED).count() == 2


def test_it_fails_when_the_attempts_run_out(define):
    agent = define(make_agent(Flaky(5, [say("hi")]), model_retry=ModelRetry(2, 1, 1)))
    with frozen() as clock:
        run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
        clock.advance(1)
        run = run_until_idle(run.pk)
    assert run.status == RunStatus.FAILED
    assert "after 2 attempts" in run.error


def test_it_counts_crashed_model_attempts(define):
    agent = define(make_agent([say("hi")], model_retry=ModelRetry(max_attempts=2)))
    run = submit(agent.name, "hi", actor="alice")
    for _ in range(2):
        with crash_at("after_intent", tool="model"), pytest.raises(SimulatedCrash):
            recover(run.pk)
    run = recover(run.pk)
    # Interrupted, not failed: past the budget the run waits for a person (C14).
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert run.attention_reason == "attempts_exhausted"
    assert run.attention_detail["operation"] == "step-1/model"
    assert "interrupted by crashes 2 times" in run.attention_detail["message"]


def test_retry_now_ends_the_wait_at_once(define):
    agent = define(make_agent(Flaky(1, [say("hi")]), model_retry=ModelRetry(3, 60, 60)))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    assert run.status == RunStatus.RETRY_WAIT
    retry(run.pk, actor="ops")
    assert run_until_idle(run.pk).status == RunStatus.COMPLETED
    assert Event.objects.get(kind=EventKind.RETRIED_NOW).actor == "ops"


def test_retry_of_a_failed_run_resets_model_attempts_and_keeps_completed_results(define, effects):
    turns = [call(("get_order", ARGS["get_order"]), step=1), say("done")]
    provider = {"down": True}

    def script(request):
        position = sum(1 for m in request.messages if m["role"] == "assistant")
        if position == 1 and provider["down"]:
            return RuntimeError("provider down")
        return turns[position]

    agent = define(make_agent(script, model_retry=ModelRetry(1, 1, 1)))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    assert run.status == RunStatus.FAILED
    assert Operation.objects.get(run=run, key="step-2/model").status == OperationStatus.FAILED
    provider["down"] = False
    retry(run.pk, actor="ops")
    assert Operation.objects.get(run=run, key="step-2/model").attempts == 0
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert effects.total == 1  # the completed get_order was replayed, not re-run
    assert Operation.objects.get(run=run, key="step-2/model").attempts == 1
    assert Operation.objects.get(run=run, key="step-1/model").attempts == 1


def test_retry_never_overrides_manual_recovery(define, effects):
    agent = define(make_agent(one_call("charge")))
    run = submit(agent.name, "hi", actor="alice")
    with crash_at("after_handler", tool="charge"), pytest.raises(SimulatedCrash):
        recover(run.pk)
    run = recover(run.pk)
    with pytest.raises(RetryRejected, match="reconcile"):
        retry(run.pk, actor="ops")
    run.refresh_from_db()
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert effects.total == 1


def test_retry_is_rejected_once_a_later_run_advanced_the_session(define):
    agent = define(make_agent(Flaky(1, [say("one"), say("two")])))
    first = run_until_idle(submit(agent.name, "first", actor="alice").pk)
    assert first.status == RunStatus.FAILED
    later = submit(agent.name, "second", actor="alice", session=first.session_id)
    with pytest.raises(RetryRejected, match=str(later.pk)):
        retry(first.pk, actor="ops")
    first.refresh_from_db()
    assert first.status == RunStatus.FAILED


@pytest.mark.parametrize("status", ["completed", "cancelled", "waiting"])
def test_retry_is_rejected_in_other_states(define, effects, status):
    agent = define(make_agent(one_call("get_order" if status == "completed" else "refund")))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    if status == "cancelled":
        run = cancel(run.pk, actor="ops")
    assert run.status == status
    with pytest.raises(RetryRejected, match=f"a {status} run cannot be retried"):
        retry(run.pk, actor="ops")
    run.refresh_from_db()
    assert run.status == status


def model_calls(run) -> int:
    """Model requests really sent for `run`: each is preceded by its committed intent."""
    return Event.objects.filter(run=run, kind=EventKind.INTENT, data__call="model").count()


def test_retry_now_ends_the_wait_but_the_attempts_made_still_count(define):
    model = Flaky(100, [say("hi")])
    agent = define(make_agent(model, model_retry=ModelRetry(max_attempts=2, initial_delay=60)))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    presses = 0
    while run.status == RunStatus.RETRY_WAIT and presses < 5:
        retry(run.pk, actor="ops")
        presses += 1
        run = run_until_idle(run.pk)
    assert presses == 1
    assert model.calls == 2
    assert run.status == RunStatus.FAILED
    assert "after 2 attempts" in run.error
    assert Operation.objects.get(run=run, key="step-1/model").attempts == 2


def test_retry_now_after_a_crashed_attempt_keeps_counting_it(define):
    model = Flaky(100, [say("hi")])
    agent = define(make_agent(model, model_retry=ModelRetry(max_attempts=3, initial_delay=60)))
    run = submit(agent.name, "hi", actor="alice")
    with crash_at("after_intent", tool="model"), pytest.raises(SimulatedCrash):
        recover(run.pk)
    run = recover(run.pk)  # attempt 2 raises: the run waits
    assert run.status == RunStatus.RETRY_WAIT
    retry(run.pk, actor="ops")
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.FAILED
    assert model_calls(run) == 3
    assert "after 3 attempts" in run.error


def test_retry_of_a_failed_run_after_retry_now_gets_a_fresh_budget(define):
    model = Flaky(100, [say("hi")])
    agent = define(make_agent(model, model_retry=ModelRetry(max_attempts=2, initial_delay=60)))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    retry(run.pk, actor="ops")
    run = run_until_idle(run.pk)
    assert (run.status, model.calls) == (RunStatus.FAILED, 2)
    retry(run.pk, actor="ops")  # a person decided to try again: two more attempts
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.RETRY_WAIT
    retry(run.pk, actor="ops")
    run = run_until_idle(run.pk)
    assert (run.status, model.calls) == (RunStatus.FAILED, 4)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_ten_operators_pressing_retry_now_at_once_requeue_once_and_attempts_stay_bounded(define):
    model = Flaky(10**6, [say("hi")])
    agent = define(make_agent(model, model_retry=ModelRetry(3, 600, 600)))
    for _ in range(10):
        run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
        rounds = 0
        while run.status == RunStatus.RETRY_WAIT and rounds < 5:
            rounds += 1
            before = Event.objects.filter(run=run, kind=EventKind.RETRIED_NOW).count()
            outcomes = at_once([lambda i=i, r=run.pk: retry(r, actor=f"op{i}") for i in range(10)])
            assert sum(map(won, outcomes)) == 1
            refused = [o for o in outcomes if not won(o)]
            assert all(isinstance(o, RetryRejected) and o.message for o in refused), refused
            assert Event.objects.filter(run=run, kind=EventKind.RETRIED_NOW).count() == before + 1
            run.refresh_from_db()
            assert run.status == RunStatus.QUEUED
            run = run_until_idle(run.pk)
        assert run.status == RunStatus.FAILED
        assert model_calls(run) == 3
        assert Operation.objects.get(run=run, key="step-1/model").attempts == 3


def test_retry_after_the_attempts_ran_out_gives_that_operation_a_fresh_budget(define, effects):
    agent = define(make_agent(one_call("get_order")))
    run = submit(agent.name, "hi", actor="alice")
    with crash_at("after_intent", tool="get_order"), pytest.raises(SimulatedCrash):
        recover(run.pk)
    key = "step-1/tool/toolu_01_0"
    # As the engine leaves a run whose re-runs after crashes ran out (C14).
    Run.objects.filter(pk=run.pk).update(
        status=RunStatus.NEEDS_ATTENTION,
        attention_reason=AttentionReason.ATTEMPTS_EXHAUSTED,
        blocked_operation=key,
        crashed_claims=2,
    )
    Operation.objects.filter(run=run, key=key).update(attempts=5)
    run = retry(run.pk, actor="ops")
    assert (run.status, run.crashed_claims, run.blocked_operation) == (RunStatus.QUEUED, 0, "")
    assert Operation.objects.get(run=run, key=key).attempts == 0
    assert Operation.objects.get(run=run, key="step-1/model").attempts == 1  # completed: kept

"""Model attempts are bounded whatever crashes do (T6, T8); persisted backoff has full jitter and
honours retry-after, and the last error says whether it was transient (T9)."""

from __future__ import annotations

import datetime as dt

import pytest

from runtime import ModelError, ModelRetry, submit
from runtime.clock import frozen
from runtime.models import ErrorKind, Event, EventKind, Operation, RunStatus
from runtime.testing import (
    SimulatedCrash,
    crash_at,
    fixed_jitter,
    recover,
    run_until_idle,
    seeded_jitter,
)
from tests.runtime.edge_support import Recorder, edge_agent, reply, text

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _overloaded(retry_after: float | None = None) -> ModelError:
    return ModelError(
        "overloaded", transient=True, retry_after=retry_after, status=529, reason="overloaded"
    )


def test_t6_a_crash_after_the_last_failed_attempt_allows_no_extra_attempt(define):
    llm = Recorder(_overloaded(), _overloaded(), reply(text("too late")))
    agent = define(edge_agent(llm, model_retry=ModelRetry(max_attempts=2, initial_delay=1)))
    with frozen(T0) as clock:
        run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
        assert run.status == RunStatus.RETRY_WAIT
        clock.advance(1)
        # The second (last) attempt fails; the worker dies before the run's transition.
        with crash_at("after_outcome", tool="model"), pytest.raises(SimulatedCrash):
            run_until_idle(run.pk)
        run = recover(run.pk)
    assert run.status == RunStatus.FAILED
    assert run.error == "model error after 2 attempts: overloaded"
    assert llm.calls == 2
    assert Operation.objects.get(run=run, key="step-1/model").attempts == 2


def test_t6_a_crash_after_a_failed_attempt_keeps_the_backoff(define):
    llm = Recorder(_overloaded(), reply(text("hello")))
    retry_policy = ModelRetry(max_attempts=3, initial_delay=10, max_delay=10, jitter=False)
    agent = define(edge_agent(llm, model_retry=retry_policy))
    with frozen(T0) as clock:
        run = submit(agent.name, "hi", actor="alice")
        with crash_at("after_outcome", tool="model"), pytest.raises(SimulatedCrash):
            run_until_idle(run.pk)
        run = recover(run.pk)
        # Not attempted again at once: the wait the failure called for is scheduled.
        assert run.status == RunStatus.RETRY_WAIT
        assert run.next_attempt_at == clock.advance(0) + dt.timedelta(seconds=10)
        assert llm.calls == 1
        clock.advance(10)
        run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert llm.calls == 2


def test_t6_interrupted_attempts_count_towards_the_maximum(define):
    llm = Recorder(reply(text("hello")))
    agent = define(edge_agent(llm, model_retry=ModelRetry(max_attempts=2)))
    run = submit(agent.name, "hi", actor="alice")
    for _ in range(2):
        with crash_at("after_intent", tool="model"), pytest.raises(SimulatedCrash):
            recover(run.pk)
    run = recover(run.pk)
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert run.attention_reason == "attempts_exhausted"
    assert llm.calls == 0


def test_t8_attempts_exhausted_fails_with_the_last_error_and_its_kind(define):
    llm = Recorder(_overloaded(), ModelError("invalid x-api-key", status=401))
    agent = define(edge_agent(llm, model_retry=ModelRetry(max_attempts=2, initial_delay=1)))
    with frozen(T0) as clock:
        run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
        assert run.error_kind == ErrorKind.TRANSIENT
        clock.advance(1)
        run = run_until_idle(run.pk)
    assert run.status == RunStatus.FAILED
    assert run.error == "model error after 2 attempts: invalid x-api-key"
    assert run.error_kind == ErrorKind.PERMANENT


def test_t9_the_error_kind_is_cleared_once_the_run_moves_on(define):
    llm = Recorder(_overloaded(), reply(text("hello")))
    agent = define(edge_agent(llm, model_retry=ModelRetry(max_attempts=3, initial_delay=1)))
    with frozen(T0) as clock:
        run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
        assert (run.status, run.error_kind) == (RunStatus.RETRY_WAIT, ErrorKind.TRANSIENT)
        scheduled = Event.objects.get(run=run, kind=EventKind.RETRY_SCHEDULED)
        assert scheduled.data["error_kind"] == "transient"
        clock.advance(1)
        run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert run.error_kind == ""


def test_t9_the_wait_honours_retry_after(define):
    llm = Recorder(_overloaded(retry_after=45), reply(text("hello")))
    agent = define(edge_agent(llm, model_retry=ModelRetry(max_attempts=3, initial_delay=1)))
    with frozen(T0), fixed_jitter(1.0):
        run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    # The backoff alone says 1 s; the provider said 45 s: at least that.
    assert run.next_attempt_at == T0 + dt.timedelta(seconds=45)


@pytest.mark.parametrize(("fraction", "seconds"), [(0.0, 0.0), (0.25, 2.0), (1.0, 8.0)])
def test_t9_full_jitter_draws_between_zero_and_the_capped_exponential(define, fraction, seconds):
    failures = [_overloaded()] * 4
    llm = Recorder(*failures, reply(text("hello")))
    policy = ModelRetry(max_attempts=5, initial_delay=2, max_delay=8)
    agent = define(edge_agent(llm, model_retry=policy))
    with frozen(T0) as clock, fixed_jitter(fraction):
        # One claim at a time: with a zero delay the retry is due at once.
        run = run_until_idle(submit(agent.name, "hi", actor="alice").pk, limit=1)
        for _ in range(3):  # attempts 2, 3 and 4 fail too; the 4th delay is capped at 8
            clock.advance(8)
            run = run_until_idle(run.pk, limit=1)
        now = clock.advance(0)
    assert run.status == RunStatus.RETRY_WAIT
    assert run.next_attempt_at == now + dt.timedelta(seconds=seconds)


def test_t9_jitter_spreads_delays_and_a_seed_repeats_them():
    policy = ModelRetry(max_attempts=5, initial_delay=2, max_delay=8)
    with seeded_jitter(7):
        first = [policy.delay_after(3) for _ in range(50)]
    with seeded_jitter(7):
        again = [policy.delay_after(3) for _ in range(50)]
    assert first == again
    assert all(0.0 <= delay <= 8.0 for delay in first)
    assert len(set(first)) == 50
    assert ModelRetry(initial_delay=2, max_delay=8, jitter=False).delay_after(3) == 8.0


def test_t9_a_bad_jitter_fraction_is_refused():
    with pytest.raises(ValueError, match="between 0 and 1"), fixed_jitter(1.5):
        pass

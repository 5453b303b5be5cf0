"""Startup discovery: every run that can move now is handed to the executor, after commit."""

from __future__ import annotations

import datetime as dt

from runtime import ModelRetry, list_runs, resume, submit
from runtime.clock import frozen
from runtime.models import RunStatus
from runtime.testing import expire_lease, run_until_idle
from tests.conftest import make_agent, one_call, say

HANDED: list[str] = []


def collect(run_id: str) -> None:
    HANDED.append(run_id)


def test_resume_hands_over_queued_expired_and_due_runs_only(
    define, effects, settings, django_capture_on_commit_callbacks
):
    settings.AGENTOPS_DISPATCH = "tests.runtime.test_discovery.collect"
    HANDED.clear()
    agent = define(make_agent(one_call("refund")))
    flaky = define(
        make_agent(
            [RuntimeError("down"), say("ok")], name="flaky", model_retry=ModelRetry(3, 10, 10)
        )
    )
    with frozen(dt.datetime(2026, 1, 1, tzinfo=dt.UTC)) as clock:
        with django_capture_on_commit_callbacks(execute=True):
            queued = submit(agent.name, "a", actor="alice")
            waiting = submit(agent.name, "b", actor="alice")
            crashed = submit(agent.name, "c", actor="alice")
            timer = submit(flaky.name, "d", actor="alice")
        run_until_idle(waiting.pk)
        run_until_idle(timer.pk)
        from runtime import store

        store.claim(crashed.pk, "dead-worker")
        HANDED.clear()
        with django_capture_on_commit_callbacks(execute=True):
            assert set(resume()) == {str(queued.pk)}
        expire_lease(crashed.pk)
        clock.advance(10)
        with django_capture_on_commit_callbacks(execute=True):
            due = resume()
    # The queued run was sent 10 s ago, within the lease period: not again yet.
    assert set(due) == {str(crashed.pk), str(timer.pk)}
    assert sorted(HANDED) == sorted([str(queued.pk), *due])
    assert {r.pk: r.status for r in list_runs()} == {
        queued.pk: RunStatus.QUEUED,
        waiting.pk: RunStatus.WAITING,
        crashed.pk: RunStatus.RUNNING,
        timer.pk: RunStatus.RETRY_WAIT,
    }


def test_the_sweep_sends_a_run_once_per_lease_period_and_again_if_nobody_took_it(
    define, effects, settings, django_capture_on_commit_callbacks
):
    settings.AGENTOPS_DISPATCH = "tests.runtime.test_discovery.collect"
    lease = settings.AGENTOPS_LEASE_SECONDS
    agent = define(make_agent(one_call("refund")))

    def sweep() -> list[str]:
        with django_capture_on_commit_callbacks(execute=True):
            return resume()

    with frozen(dt.datetime(2026, 1, 1, tzinfo=dt.UTC)) as clock:
        queued = submit(agent.name, "a", actor="alice")
        HANDED.clear()
        assert sweep() == [str(queued.pk)]
        assert sweep() == []
        clock.advance(lease - 1)
        assert sweep() == []
        assert HANDED.count(str(queued.pk)) == len(HANDED) == 1
        # A lease period on and still queued: the message was lost (the broker was down, or
        # the worker it went to died before taking it). It is sent again, once.
        clock.advance(1)
        assert sweep() == [str(queued.pk)]
        assert sweep() == []
    assert HANDED.count(str(queued.pk)) == len(HANDED) == 2
    assert list_runs()[0].status == RunStatus.QUEUED


def test_a_run_taken_since_its_send_is_sent_again_as_soon_as_it_can_move(
    define, effects, settings, django_capture_on_commit_callbacks
):
    settings.AGENTOPS_DISPATCH = "tests.runtime.test_discovery.collect"
    agent = define(make_agent(one_call("refund")))
    from runtime import store

    with frozen(dt.datetime(2026, 1, 1, tzinfo=dt.UTC)) as clock:
        run = submit(agent.name, "a", actor="alice")
        with django_capture_on_commit_callbacks(execute=True):
            assert resume() == [str(run.pk)]
        clock.advance(1)
        store.claim(run.pk, "a-worker-that-dies")
        expire_lease(run.pk)
        # Well within the lease period of the first send, but a worker took that one.
        with django_capture_on_commit_callbacks(execute=True):
            assert resume() == [str(run.pk)]
            assert resume() == []

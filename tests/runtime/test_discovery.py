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
    assert set(due) == {str(queued.pk), str(crashed.pk), str(timer.pk)}
    assert sorted(HANDED) == sorted([str(queued.pk), *due])
    assert {r.pk: r.status for r in list_runs()} == {
        queued.pk: RunStatus.QUEUED,
        waiting.pk: RunStatus.WAITING,
        crashed.pk: RunStatus.RUNNING,
        timer.pk: RunStatus.RETRY_WAIT,
    }

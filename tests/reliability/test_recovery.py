"""What the database remembers when the broker and the workers forget: timers, lost messages,
and unfinished runs found by workers as they start."""

from __future__ import annotations

import datetime as dt
import signal
import time

import pytest
from django.utils import timezone

from runtime import engine, store, submit
from runtime.models import Event, EventKind, Operation, Run, RunStatus
from runtime.testing import expire_lease
from tests.reliability.agents import EFFECTS_ENV, RETRY_DELAY, one_call, plan
from tests.reliability.harness import SWEEP_SECONDS, Cluster, holds, settled
from tests.support.processes import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# Delivery of a swept message and the claim itself, on a busy CI machine.
DELIVERY_SLACK = 1.0


def test_retry_timers_fire_exactly_once_after_every_worker_was_killed(
    cluster: Cluster, agent, observe
) -> None:
    first = [cluster.worker(f"first-{i}", wait=False) for i in range(2)]
    cluster.wait_ready(*first)
    runs = [
        submit(agent.name, plan([("lookup", {"order_id": f"A{i}"})], model_errors=(1,)), actor="t")
        for i in range(5)
    ]
    for run in runs:
        cluster.publish(run.pk)
    wait_until(
        lambda: Run.objects.filter(pk__in=[r.pk for r in runs], status="retry_wait").count() == 5,
        timeout=30,
        what="every run to wait for its retry",
    )
    due = {
        run.pk: dt.datetime.fromisoformat(
            Event.objects.get(run=run, kind=EventKind.RETRY_SCHEDULED).data["next_attempt_at"]
        )
        for run in runs
    }
    for process in first:  # every worker; there is no beat: the sweep lives in the workers
        process.send(signal.SIGKILL)
        assert process.wait_exit(10) == -signal.SIGKILL

    second = [cluster.worker(f"second-{i}", wait=False) for i in range(2)]
    cluster.wait_ready(*second)
    restarted = timezone.now()
    # The restart must beat the timers, or this would test startup discovery instead.
    assert restarted < min(due.values())
    wait_until(
        lambda: settled(*due, statuses=("queued", "running", "retry_wait")),
        timeout=RETRY_DELAY + 30,
        what="the timers to fire",
    )

    lateness = []
    for run in runs:
        run.refresh_from_db()
        assert run.status == RunStatus.COMPLETED
        scheduled = Event.objects.get(run=run, kind=EventKind.RETRY_SCHEDULED)
        fired = Event.objects.filter(run=run, kind=EventKind.CLAIMED, id__gt=scheduled.id)
        assert fired.count() == 1  # exactly once, whoever swept it
        late = (fired.get().created_at - due[run.pk]).total_seconds()
        assert 0 <= late <= SWEEP_SECONDS + DELIVERY_SLACK
        lateness.append(late)
        assert Operation.objects.get(run=run, key="step-1/model").attempts == 2
        assert holds(run.pk)[1] == []
    records = cluster.records()
    assert records.total_effects == 5
    observe(
        f"runs=5 in retry_wait, killed every worker (2 of 2, no beat), restarted "
        f"{(min(due.values()) - restarted).total_seconds():.1f}s before the first due time: "
        f"timers fired=5 (once each), lateness after due max={max(lateness):.2f}s "
        f"mean={sum(lateness) / len(lateness):.2f}s (sweep {SWEEP_SECONDS:g}s), "
        f"effects={records.total_effects} duplicates={records.duplicates}"
    )


def test_the_sweep_recovers_a_run_whose_message_was_lost(cluster: Cluster, agent, observe) -> None:
    worker = cluster.worker("sweeper")  # started, and its startup discovery done
    # Committed, then no enqueue (the dispatch hook is off here): the message is lost.
    run = submit(agent.name, one_call("ticket"), actor="t")
    committed = time.monotonic()
    wait_until(lambda: settled(run.pk), timeout=10, what="the sweep to recover the run")
    took = time.monotonic() - committed
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert f"sweep: handed 1 run(s) to the workers: {run.pk}" in worker.text()
    assert took <= SWEEP_SECONDS + DELIVERY_SLACK
    assert cluster.records().total_effects == 1
    observe(f"lost message: runs=1 recovered by the sweep after {took:.2f}s (sweep 0.5s)")


def test_a_starting_worker_resumes_every_unfinished_run(
    cluster: Cluster, agent, observe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing in the broker, no worker: queued, expired and due runs all move on start."""
    monkeypatch.setenv(EFFECTS_ENV, str(cluster.effects))  # runs advanced in this process
    queued = submit(agent.name, one_call("lookup"), actor="t")
    expired = submit(agent.name, one_call("lookup", order_id="A2"), actor="t")
    store.claim(expired.pk, "a-worker-that-died")
    expire_lease(expired.pk)
    timer = submit(agent.name, plan([("lookup", {"order_id": "A3"})], model_errors=(1,)), actor="t")
    engine.advance(timer.pk, owner="a-worker-that-stopped")
    Run.objects.filter(pk=timer.pk).update(next_attempt_at=timezone.now())  # now due
    waiting = submit(agent.name, plan([("ask_operator", {"question": "ok?"})]), actor="t")
    engine.advance(waiting.pk, owner="a-worker-that-stopped")
    assert Run.objects.get(pk=waiting.pk).status == RunStatus.WAITING

    worker = cluster.worker("starter")
    movable = [queued.pk, expired.pk, timer.pk]
    wait_until(
        lambda: settled(*movable, statuses=("queued", "running", "retry_wait")),
        timeout=20,
        what="the runs to be resumed",
    )
    assert set(Run.objects.filter(pk__in=movable).values_list("status", flat=True)) == {
        RunStatus.COMPLETED
    }
    assert Run.objects.get(pk=waiting.pk).status == RunStatus.WAITING  # needs a person
    assert "worker start: handed 3 run(s)" in worker.text()
    assert Event.objects.filter(run_id=expired.pk, kind=EventKind.LEASE_EXPIRED).count() == 1
    observe("worker start: resumed 3 runs (queued, expired lease, due timer); left 1 waiting")

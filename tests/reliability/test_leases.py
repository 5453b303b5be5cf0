"""One run, one worker at a time: concurrent deliveries, the heartbeat, and the fence.

Claim intervals come from the run's event log (`claimed` to the event that released the run);
tool executions are also timed by the fake service in each process. Neither may overlap.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest
from django.db import DatabaseError, transaction

from runtime import submit
from runtime.models import Event, EventKind, Operation, Run, RunStatus
from tests.reliability.agents import one_call, plan
from tests.reliability.harness import LEASE_SECONDS, Cluster, holds, overlapping_spans, settled
from tests.support.processes import Process, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_it_advances_a_run_delivered_to_many_workers_at_once_exactly_once(
    cluster: Cluster, agent, observe
) -> None:
    workers = [cluster.worker(f"solo-{i}", wait=False) for i in range(4)]
    workers.append(cluster.worker("prefork", pool="prefork", concurrency=2, wait=False))
    cluster.wait_ready(*workers)
    steps = [
        [("lookup", {"order_id": "A1", "seconds": 0.2})],
        [("ticket", {"order_id": "A1", "seconds": 0.1})],
    ]
    # Runs delivered 2 to 8 times at once; the quick_retry runs fail the first attempt of each of
    # their three model requests, so every worker's sweep delivers them again each time their
    # 0.3 s timer is due: four claims each, by whichever worker wins.
    copies = {submit(agent.name, plan(*steps), actor="t").pk: n for n in range(2, 9)}
    retried = [
        submit("quick_retry", plan(*steps, model_errors=(1, 2, 3)), actor="t").pk for _ in range(4)
    ]
    for run_id, n in copies.items():
        cluster.publish(run_id, copies=n)
    for run_id in retried:
        cluster.publish(run_id, copies=4)
    every = [*copies, *retried]
    wait_until(
        lambda: settled(*every, statuses=("queued", "running", "retry_wait")),
        timeout=60,
        what="every run to finish",
    )

    records = cluster.records()
    claims = deliveries = idle_deliveries = 0
    for run_id in every:
        run = Run.objects.get(pk=run_id)
        assert run.status == RunStatus.COMPLETED
        run_holds, problems = holds(run_id)
        assert problems == []
        expected_claims = 4 if run_id in retried else 1
        assert len(run_holds) == expected_claims
        assert not Event.objects.filter(run_id=run_id, kind=EventKind.LEASE_EXPIRED).exists()
        advanced, idle = cluster.deliveries(run_id)
        assert advanced == expected_claims
        assert advanced + idle >= copies.get(run_id, 4)
        claims += len(run_holds)
        deliveries += advanced + idle
        idle_deliveries += idle
        for key in ("step-2/tool/toolu_02_0",):
            assert records.effects[f"{run_id}:{key}"] == 1
        assert records.calls[f"{run_id}:step-1/tool/toolu_01_0"] == 1
    assert overlapping_spans(records) == []
    assert records.duplicates == 0
    observe(
        f"runs={len(every)} workers=5 processes, 6 consumers (4 solo, 1 prefork x2) "
        f"copies per run=2..8 (+ sweeps) "
        f"deliveries={deliveries} claims={claims} deliveries that did nothing={idle_deliveries} "
        f"overlapping claims=0 overlapping tool calls=0 duplicates={records.duplicates}"
    )


@pytest.mark.parametrize("heartbeat", [True, False], ids=["heartbeat", "no-heartbeat"])
def test_e3_the_heartbeat_keeps_the_lease_of_a_long_tool_call(
    cluster: Cluster, agent, observe, heartbeat: bool
) -> None:
    """A call three leases long keeps its worker's lease; without the heartbeat it is taken."""
    holder = cluster.worker("holder", heartbeat=heartbeat)
    run = submit(agent.name, one_call("slow_ticket", seconds=3 * LEASE_SECONDS), actor="t")
    cluster.publish(run.pk)
    wait_until(lambda: cluster.records().calls, timeout=20, what="the long call to start")
    other = cluster.worker("other")  # idle and sweeping every half second meanwhile

    wait_until(lambda: settled(run.pk), timeout=40, what="the run to finish")
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    run_holds, problems = holds(run.pk)
    assert problems == []
    records = cluster.records()
    assert records.total_effects == 1  # the service deduplicates the repeated call
    takeovers = Event.objects.filter(run=run, kind=EventKind.LEASE_EXPIRED).count()
    if heartbeat:
        assert takeovers == 0
        assert [h.ended_by for h in run_holds] == ["completed"]
        assert sum(records.calls.values()) == 1
    else:
        assert takeovers >= 1
        assert run_holds[0].ended_by == "takeover"
        # The old holder finished its call and then found its write refused by the fence.
        holder.wait_for_log(f"run {run.pk}: lease lost", timeout=20)
    observe(
        f"heartbeat={'on' if heartbeat else 'off'}: call={3 * LEASE_SECONDS:g}s "
        f"lease={LEASE_SECONDS:g}s claims={len(run_holds)} takeovers={takeovers} "
        f"redeliveries ignored={other.count(f'run {run.pk}: not claimable')} "
        f"effects={records.total_effects} calls={sum(records.calls.values())}"
    )


def _pause(process: Process, run_id: object) -> float:
    """SIGSTOP the worker at a moment it holds no row lock on the run (else nobody could
    take over until it resumes); return when it was stopped."""
    for _ in range(50):
        process.send(signal.SIGSTOP)
        stopped_at = time.time()
        try:
            with transaction.atomic():
                Run.objects.select_for_update(nowait=True).get(pk=run_id)
        except DatabaseError:
            process.send(signal.SIGCONT)
            time.sleep(0.01)
            continue
        return stopped_at
    raise AssertionError("the worker kept holding the run's row lock")


def _state(run_id: object) -> tuple[object, ...]:
    """Everything a worker may write about a run."""
    return (
        list(Run.objects.filter(pk=run_id).values()),
        list(Operation.objects.filter(run_id=run_id).order_by("id").values()),
        list(Event.objects.filter(run_id=run_id).order_by("id").values()),
    )


def _paused_worker_scenario(cluster: Cluster, agent, *, fence: bool) -> dict[str, Any]:
    """A worker paused mid-call past its lease, a takeover that finishes the run, a resume.

    Returns what the resumed worker changed in the database (nothing, with the fence).
    """
    paused = cluster.worker("paused", fence=fence)
    steps = [
        [("slow_ticket", {"order_id": "A1", "seconds": 1.0})],
        [("charge", {"order_id": "A1"})],
    ]
    run = submit(agent.name, plan(*steps), actor="t")
    cluster.publish(run.pk)
    wait_until(lambda: cluster.records().calls, timeout=20, what="the long call to start")
    _pause(paused, run.pk)

    cluster.worker("taker")
    wait_until(lambda: settled(run.pk), timeout=30, what="the takeover to finish the run")
    finished = _state(run.pk)
    paused.send(signal.SIGCONT)
    # The resumed worker finishes its sleep, tries to write, and its task ends either way.
    wait_until(
        lambda: "succeeded in" in paused.text() or "raised unexpected" in paused.text(),
        timeout=30,
        what="the resumed worker's task to end",
    )
    time.sleep(2 * LEASE_SECONDS / 3)  # one more heartbeat, if it still beats
    after = _state(run.pk)
    run.refresh_from_db()
    return {
        "run": run,
        "records": cluster.records(),
        "changed": [
            part
            for part, before, now in zip(
                ("run", "operations", "events"), finished, after, strict=True
            )
            if before != now
        ],
        "new_events": len(after[2]) - len(finished[2]),
        "refusals": paused.count(f"run {run.pk}: lease lost"),
        "paused_pid": paused.pid,
        "takeovers": Event.objects.filter(run=run, kind=EventKind.LEASE_EXPIRED).count(),
        "problems": holds(run.pk)[1],
    }


def test_e2_a_paused_worker_cannot_write_after_its_run_was_taken_over(
    cluster: Cluster, agent, observe
) -> None:
    seen = _paused_worker_scenario(cluster, agent, fence=True)
    run, records = seen["run"], seen["records"]
    assert run.status == RunStatus.COMPLETED
    assert seen["takeovers"] == 1
    assert seen["changed"] == []  # the resumed worker wrote nothing at all
    assert seen["refusals"] == 1  # it tried, and the fence refused it
    assert seen["problems"] == []
    slow_id = f"{run.pk}:step-1/tool/toolu_01_0"
    assert records.calls[slow_id] == 2  # paused worker, then the idempotent re-run
    assert records.effects[slow_id] == 1
    assert records.effects[f"{run.pk}:step-2/tool/toolu_02_0"] == 1
    assert Operation.objects.get(run=run, key="step-1/tool/toolu_01_0").attempts == 2
    observe(
        f"SIGSTOP past the lease, takeover, SIGCONT: the paused worker's write refused by the "
        f"fence={seen['refusals']}, rows it changed=0, events it added=0, "
        f"effects={records.total_effects} (slow ticket 1 of 2 calls, charge 1) "
        f"duplicates={records.duplicates}"
    )


def test_without_the_fence_the_paused_worker_test_catches_the_stale_writes(
    cluster: Cluster, agent, observe
) -> None:
    """The same scenario with the fence check removed in the worker: the checks above fail."""
    seen = _paused_worker_scenario(cluster, agent, fence=False)
    landed = [f for f in seen["records"].fenced if f[1] == seen["paused_pid"] and f[3] == "landed"]
    assert seen["changed"] != []
    assert seen["new_events"] >= 1
    assert seen["refusals"] == 0
    observe(
        f"fence removed (test-only switch): the resumed worker's writes landed; it changed "
        f"{', '.join(seen['changed'])}, added {seen['new_events']} event(s) after completion, "
        f"{len(landed)} fenced writes of that process landed in all (the fenced test fails)"
    )

"""Real workers killed with SIGKILL at every crash window, recovered by another worker, per policy.

For each window, four `celery worker` processes start with AGENTOPS_CRASH_AT=<window>:<tool>,
one per recovery policy, each on its own queue so it takes exactly its own run; each dies at
the window. Then a fresh worker (no crash variable) recovers all four through the sweep, and the
outcome is checked against the recovery table, on effects counted by a fake service in files.
"""

from __future__ import annotations

import signal

import pytest

from runtime import submit
from runtime.models import Event, Operation, OperationStatus, Run, RunStatus
from tests.reliability.agents import POLICY_TOOLS, Records, one_call
from tests.reliability.harness import Cluster, holds, settled
from tests.support.processes import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

KEY = "step-1/tool/toolu_01_0"
WINDOWS = [
    "before_intent",
    "after_intent",
    "in_handler",
    "after_handler",
    "during_outcome",
    "after_outcome",
]
# The handler's effect happened before the process died in these windows.
EFFECT_LANDED = {"in_handler", "after_handler", "during_outcome"}
# Intent committed, outcome not: the recovery policy decides.
UNCERTAIN = {"after_intent", "in_handler", "after_handler", "during_outcome"}


def _state_at_crash(window: str, run: Run) -> None:
    """The log holds exactly what the window says had committed when the process died."""
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    op = Operation.objects.filter(run=run, key=KEY).first()
    if window == "before_intent":
        assert op is None
    elif window == "after_outcome":
        assert op is not None
        assert op.status == OperationStatus.COMPLETED
    else:
        assert op is not None
        assert op.status == OperationStatus.STARTED  # during_outcome: rolled back


def _check_recovery(policy: str, window: str, run: Run, records: Records) -> str:
    """Assert the recovery table for one run; return a one-line summary of what happened."""
    run.refresh_from_db()
    op = Operation.objects.get(run=run, key=KEY)
    operation_id = f"{run.pk}:{KEY}"
    effects, calls = records.effects[operation_id], records.calls[operation_id]
    landed = window in EFFECT_LANDED

    if window not in UNCERTAIN:  # nothing of the call, or all of it, was committed
        assert run.status == RunStatus.COMPLETED
        assert (effects, calls, op.attempts) == (1, 1, 1)
    elif policy == "manual":
        assert run.status == RunStatus.NEEDS_ATTENTION
        assert run.attention_reason == "uncertain_operation"
        assert run.blocked_operation == KEY
        assert op.status == OperationStatus.STARTED
        assert (effects, calls) == ((1, 1) if landed else (0, 0))
    elif policy == "safe":
        assert run.status == RunStatus.COMPLETED
        assert op.attempts == 2
        assert (effects, calls) == ((2, 2) if landed else (1, 1))
    elif policy == "idempotent":
        assert run.status == RunStatus.COMPLETED
        assert op.attempts == 2
        assert effects == 1
        assert calls == (2 if landed else 1)
    else:  # report
        assert run.status == RunStatus.COMPLETED
        assert op.attempts == 1
        assert op.is_error
        assert op.result["kind"] == "tool-durability-error"
        assert "tool-durability-error" in run.output  # what the model was shown
        assert (effects, calls) == ((1, 1) if landed else (0, 0))
    _, problems = holds(run.pk)
    assert problems == []
    return f"{policy}={run.status} effects={effects} calls={calls} attempts={op.attempts}"


@pytest.mark.parametrize("window", WINDOWS)
def test_c8_it_recovers_a_worker_killed_at_each_window_by_policy(
    cluster: Cluster, agent, observe, window: str
) -> None:
    runs = {
        policy: submit(agent.name, one_call(tool), actor="reliability-test")
        for policy, tool in POLICY_TOOLS.items()
    }
    doomed = {
        policy: cluster.worker(
            f"crash-{policy}",
            queues=f"crash-{policy}",
            crash_at=f"{window}:{tool}",
            wait=False,
        )
        for policy, tool in POLICY_TOOLS.items()
    }
    cluster.wait_ready(*doomed.values())
    for policy, run in runs.items():
        cluster.publish(run.pk, queue=f"crash-{policy}")

    for process in doomed.values():
        assert process.wait_exit(30) == -signal.SIGKILL
    for run in runs.values():
        _state_at_crash(window, run)
    at_crash = cluster.records().total_effects

    cluster.worker("recovery")
    wait_until(lambda: settled(*(r.pk for r in runs.values())), timeout=30, what="recovery")

    records = cluster.records()
    summaries = [_check_recovery(p, window, run, records) for p, run in runs.items()]
    # Only `safe` may repeat an effect (it declares its calls harmless to repeat).
    repeated = {
        policy: records.effects[f"{run.pk}:{KEY}"] - 1
        for policy, run in runs.items()
        if records.effects[f"{run.pk}:{KEY}"] > 1
    }
    assert set(repeated) <= {"safe"}
    observe(
        f"window={window}: runs=4 kills=4 (SIGKILL) effects at crash={at_crash} "
        f"after recovery={records.total_effects} duplicates outside `safe`=0 "
        f"safe re-runs={repeated.get('safe', 0)} | " + "; ".join(summaries)
    )


def test_it_does_nothing_new_when_a_finished_task_is_redelivered(
    cluster: Cluster, agent, observe
) -> None:
    """The window after the run's last write and before the broker ack: the message comes back."""
    run = submit(agent.name, one_call("charge"), actor="reliability-test")
    doomed = cluster.worker("crash-before-ack", queues="acked-late", crash_at="before_ack")
    cluster.publish(run.pk, queue="acked-late")
    assert doomed.wait_exit(30) == -signal.SIGKILL
    assert doomed.count(f"run {run.pk}: advanced") == 1
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    before = (run.status, run.fence, run.updated_at)
    events = list(Event.objects.filter(run=run).order_by("id").values_list("id", flat=True))

    # The unacknowledged message goes back to its queue after the visibility timeout.
    again = cluster.worker("redelivery", queues="acked-late")
    wait_until(
        lambda: again.count(f"run {run.pk}: not claimable") >= 1,
        timeout=30,
        what="the redelivered message",
    )
    run.refresh_from_db()
    assert (run.status, run.fence, run.updated_at) == before
    assert list(Event.objects.filter(run=run).order_by("id").values_list("id", flat=True)) == events
    records = cluster.records()
    assert records.total_effects == 1
    assert sum(records.calls.values()) == 1
    observe(
        f"before_ack: runs=1 kills=1 redeliveries={again.count(f'run {run.pk}: not claimable')} "
        f"new events=0 effects={records.total_effects} duplicates={records.duplicates}"
    )

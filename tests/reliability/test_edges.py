"""Crash loops and attempt budgets with real worker processes killed by SIGKILL (C13, C14), and a
cancel reaching a long handler in a real worker (E4)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from runtime import cancel, register, submit
from runtime.models import (
    AttentionReason,
    Event,
    EventKind,
    Operation,
    OperationStatus,
    Run,
    RunStatus,
)
from tests.reliability.agents import one_call
from tests.reliability.harness import Cluster
from tests.support.processes import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

KEY = "step-1/tool/toolu_01_0"


class EdgeCluster(Cluster):
    """The reliability cluster, with the patient agent loaded and runtime settings of a test."""

    def __init__(self, folder: Path, *, broker_url: str, env: dict[str, str]) -> None:
        super().__init__(folder, broker_url=broker_url)
        self.extra_env = env

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        env = super()._env(extra)
        env["AGENTOPS_AGENT_MODULES"] = "tests.reliability.agents,tests.reliability.edge_agents"
        env.update(self.extra_env)
        return env


@pytest.fixture
def edge_cluster(cluster: Cluster, agent: Any, settings: Any) -> Any:
    """Builds an EdgeCluster; after `agent`, whose code registry it extends."""
    settings.AGENTOPS_AGENT_MODULES = ["tests.reliability.agents", "tests.reliability.edge_agents"]

    def build(**env: str) -> EdgeCluster:
        built = EdgeCluster(cluster.folder / "edge", broker_url=cluster.broker_url, env=env)
        cluster.processes = built.processes  # killed with the fixture's own, at the end
        return built

    return build


@pytest.mark.parametrize(
    "case",
    [
        ("after_intent", "3", AttentionReason.CRASH_LOOP),
        ("in_handler", "3", AttentionReason.CRASH_LOOP),
        ("in_handler", "10", AttentionReason.ATTEMPTS_EXHAUSTED),
    ],
    ids=["after_intent-crash_loop", "in_handler-crash_loop", "in_handler-attempts_exhausted"],
)
def test_c13_c14_a_worker_that_dies_every_time_stops_after_the_budget(
    edge_cluster, agent, observe, case: tuple[str, str, str]
) -> None:
    window, claims, reason = case
    cluster = edge_cluster(AGENTOPS_CRASH_LOOP_CLAIMS=claims, AGENTOPS_OPERATION_ATTEMPTS="3")
    run = submit(agent.name, one_call("lookup"), actor="reliability-test")
    cluster.publish(run.pk)
    kills = 0
    for attempt in range(6):
        worker = cluster.worker(f"doomed-{attempt}", crash_at=f"{window}:lookup")

        def stopped(worker: Any = worker) -> bool:
            return not worker.alive() or (
                Run.objects.get(pk=run.pk).status == RunStatus.NEEDS_ATTENTION
            )

        wait_until(stopped, timeout=60, what="the worker to die or the run to stop")
        if not worker.alive():
            assert worker.popen.returncode == -signal.SIGKILL
            kills += 1
        if Run.objects.get(pk=run.pk).status == RunStatus.NEEDS_ATTENTION:
            break
    run.refresh_from_db()
    records = cluster.records()
    operation_id = f"{run.pk}:{KEY}"
    op = Operation.objects.get(run=run, key=KEY)
    assert run.attention_reason == reason
    assert kills == 3
    assert op.attempts == 3
    assert records.effects[operation_id] == (3 if window == "in_handler" else 0)
    if reason == AttentionReason.ATTEMPTS_EXHAUSTED:
        assert run.blocked_operation == KEY
    claimed = Event.objects.filter(run=run, kind=EventKind.CLAIMED).count()
    observe(
        f"window={window} crash-loop claims={claims}: workers killed={kills} claims={claimed} "
        f"attempts of lookup={op.attempts} effects={records.effects[operation_id]} "
        f"-> needs_attention ({run.attention_reason}); nothing loops"
    )


def test_e4_a_cancel_stops_a_long_handler_in_a_real_worker(edge_cluster, agent, observe) -> None:
    from tests.reliability.edge_agents import patient_desk

    register([patient_desk], actor="reliability-test")
    cluster = edge_cluster()
    worker = cluster.worker("patient-worker")
    run = submit(patient_desk.name, "work", actor="reliability-test")
    cluster.publish(run.pk)
    notes = cluster.effects / "patient"
    wait_until(lambda: notes.exists() and "started" in notes.read_text(), timeout=30, what="start")

    cancel(run.pk, actor="ops", reason="not needed")
    wait_until(
        lambda: "cancelled" in notes.read_text(), timeout=30, what="the handler to see the cancel"
    )
    wait_until(
        lambda: worker.count(f"run {run.pk}: advanced") == 1, timeout=30, what="the task to end"
    )
    lines = [line.split("\t") for line in notes.read_text().splitlines()]
    assert [line[1] for line in lines] == ["started", "cancelled"]  # never "finished"
    polls = int(lines[1][2])
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    op = Operation.objects.get(run=run, key=KEY)
    assert op.status == OperationStatus.STARTED  # nothing written after the cancel
    assert not Event.objects.filter(run=run, kind=EventKind.OUTCOME, operation_key=KEY).exists()
    assert "lease lost" in worker.text()
    observe(
        f"cancel reached a 60 s handler after {polls} polls ({polls * 0.1:.1f} s of work): "
        "it stopped, the worker wrote nothing more, the run is cancelled"
    )

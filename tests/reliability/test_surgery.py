"""Run surgery with real worker processes: pause at every kind of boundary, bulk jobs over
10,000 runs with a worker killed mid-job while operators act on single runs."""

from __future__ import annotations

import random
import signal
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.models import Count, Q
from django.utils import timezone

from runtime import AgentOpsError, bulk, cancel, pause, respond, resume, submit
from runtime.models import (
    AttentionReason,
    BulkItemStatus,
    BulkJob,
    BulkJobItem,
    BulkJobStatus,
    Event,
    EventKind,
    Interaction,
    Operation,
    Run,
    RunStatus,
    Session,
)
from tests.reliability.agents import RETRY_DELAY, plan
from tests.reliability.harness import SWEEP_SECONDS, Cluster, holds
from tests.support.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

# Sweeps a paused run must sit through unclaimed to show that nothing picks it up.
QUIET = SWEEP_SECONDS * 4


def _model_calls(cluster: Cluster, run_id: Any) -> int:
    path = Path(cluster.effects) / "model_calls"
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if line.startswith(f"{run_id}:"))


def _status(run_id: Any) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


def _wait_status(run_id: Any, status: str, timeout: float = 30) -> None:
    wait_until(lambda: _status(run_id) == status, timeout=timeout, what=f"run to be {status}")


def _wait_intent(run_id: Any, key: str) -> None:
    wait_until(
        lambda: Event.objects.filter(
            run_id=run_id, kind=EventKind.INTENT, operation_key=key
        ).exists(),
        timeout=30,
        what=f"the intent of {key}",
    )


def _claims(run_id: Any) -> int:
    return Event.objects.filter(run_id=run_id, kind=EventKind.CLAIMED).count()


def _stays_paused(run_id: Any) -> None:
    claims = _claims(run_id)
    time.sleep(QUIET)
    assert _status(run_id) == RunStatus.PAUSED
    assert _claims(run_id) == claims  # never claimed while paused


def test_pause_mid_model_request_stops_after_it_and_resume_goes_on(cluster, agent, observe):
    cluster.worker("w1")
    run = submit(agent.name, plan([("lookup", {"order_id": "A1"})], model_seconds=1.5), actor="t")
    cluster.publish(run.pk)
    _wait_intent(run.pk, "step-1/model")
    pause(run.pk, actor="alice", reason="drill")
    assert _status(run.pk) == RunStatus.RUNNING  # the request in flight goes on
    _wait_status(run.pk, RunStatus.PAUSED)
    ops = dict(Operation.objects.filter(run=run).values_list("key", "status"))
    assert ops == {"step-1/model": "completed"}  # its outcome kept, the next call not started
    assert cluster.records().total_effects == 0
    _stays_paused(run.pk)

    resume(run.pk, actor="alice")
    _wait_status(run.pk, RunStatus.COMPLETED)
    assert Operation.objects.get(run=run, key="step-1/model").attempts == 1
    assert _model_calls(cluster, run.pk) == 2  # step 1 once (replayed after resume), step 2
    assert cluster.records().total_effects == 1
    assert holds(run.pk)[1] == []
    observe("paused mid model request: 1 request finished and kept, resumed, no call repeated")


def test_pause_mid_tool_call_stops_after_it_and_resume_goes_on(cluster, agent, observe):
    cluster.worker("w1")
    run = submit(agent.name, plan([("lookup", {"order_id": "A1", "seconds": 1.5})]), actor="t")
    cluster.publish(run.pk)
    _wait_intent(run.pk, "step-1/tool/toolu_01_0")
    pause(run.pk, actor="alice")
    _wait_status(run.pk, RunStatus.PAUSED)
    ops = dict(Operation.objects.filter(run=run).values_list("key", "status"))
    assert ops == {"step-1/model": "completed", "step-1/tool/toolu_01_0": "completed"}
    assert cluster.records().total_effects == 1
    _stays_paused(run.pk)

    resume(run.pk, actor="alice")
    _wait_status(run.pk, RunStatus.COMPLETED)
    assert cluster.records().total_effects == 1  # the call was replayed, never re-run
    assert _model_calls(cluster, run.pk) == 2
    observe("paused mid tool call: the call finished once, resumed, nothing repeated")


def test_pause_while_waiting_keeps_the_answer_until_resume(cluster, agent):
    cluster.worker("w1")
    run = submit(agent.name, plan([("ask_operator", {"question": "ok?"})]), actor="t")
    cluster.publish(run.pk)
    _wait_status(run.pk, RunStatus.WAITING)
    pause(run.pk, actor="alice")
    respond(Interaction.objects.get(run=run).pk, {"answer": "yes"}, actor="bob")
    _stays_paused(run.pk)
    resume(run.pk, actor="alice")
    _wait_status(run.pk, RunStatus.COMPLETED)
    assert "yes" in Run.objects.get(pk=run.pk).output


def test_a_paused_runs_timer_waits_for_resume(cluster, agent, observe):
    cluster.worker("w1")
    run = submit(agent.name, plan([("lookup", {"order_id": "A1"})], model_errors=(1,)), actor="t")
    cluster.publish(run.pk)
    _wait_status(run.pk, RunStatus.RETRY_WAIT)
    pause(run.pk, actor="alice")
    due = Run.objects.get(pk=run.pk).next_attempt_at
    assert due is not None
    wait_until(lambda: timezone.now() > due, timeout=RETRY_DELAY + 5, what="the due time")
    _stays_paused(run.pk)
    assert _model_calls(cluster, run.pk) == 1  # the timer did not fire

    resumed = timezone.now()
    resume(run.pk, actor="alice")
    _wait_status(run.pk, RunStatus.COMPLETED)
    fired = Event.objects.filter(run=run, kind=EventKind.CLAIMED, created_at__gte=resumed)
    assert fired.count() == 1
    assert Operation.objects.get(run=run, key="step-1/model").attempts == 2
    observe(f"retry timer due {RETRY_DELAY:g}s later held while paused, fired once after resume")


# --- bulk jobs ----------------------------------------------------------------------------------

RUNS = 10_000
OPERATOR_ACTIONS = 40


def _insert_blocked_runs(count: int) -> list[Any]:
    """`count` runs blocked on a missing version, inserted in bulk (no worker picks them up)."""
    now = timezone.now()
    sessions = [Session(agent="ghost", created_at=now) for _ in range(count)]
    Session.objects.bulk_create(sessions, batch_size=2000)
    runs = [
        Run(
            id=uuid.uuid4(),
            session=session,
            seq=1,
            agent="ghost",
            version="1",
            fingerprint="0" * 64,
            status=RunStatus.NEEDS_ATTENTION,
            attention_reason=AttentionReason.VERSION_MISSING,
            input="{}",
            created_at=now,
            updated_at=now,
        )
        for session in sessions
    ]
    Run.objects.bulk_create(runs, batch_size=2000)
    return [run.pk for run in runs]


def _operators(run_ids: list[Any], acted: Counter[str]) -> None:
    """An operator pausing or cancelling single runs, one every few milliseconds."""
    try:
        for index, run_id in enumerate(run_ids):
            try:
                if index % 2:
                    cancel(run_id, actor="carol", reason="single")
                else:
                    pause(run_id, actor="carol", reason="single")
                acted["ok"] += 1
            except AgentOpsError:
                acted["refused"] += 1
            time.sleep(0.1)
    finally:
        connection.close()


def _publish_job(cluster: Cluster, job_id: Any) -> None:
    from django.conf import settings

    from agentops.celery import app
    from agentops.tasks import work_bulk_job

    with app.connection_for_write(cluster.broker_url) as conn:
        work_bulk_job.apply_async(
            args=[str(job_id)], connection=conn, queue=settings.CELERY_TASK_DEFAULT_QUEUE
        )


def test_a_bulk_job_over_10000_runs_touches_each_once_through_a_killed_worker(
    cluster, agent, observe
):
    ids = _insert_blocked_runs(RUNS)
    first = cluster.worker("bulk-1")
    started = time.monotonic()
    job = bulk.submit("pause", {"agent": "ghost"}, actor="ops", key="outage-1", reason="outage")
    assert job.total == RUNS
    _publish_job(cluster, job.pk)

    # Operators act on single runs while the job runs (before and after the kill): each run is
    # touched by the job, or skipped with the reason, never both.
    chosen = random.Random(17).sample(ids, OPERATOR_ACTIONS)
    acted = Counter[str]()
    operators = threading.Thread(target=_operators, args=(chosen, acted))
    operators.start()
    wait_until(
        lambda: BulkJob.objects.get(pk=job.pk).touched >= RUNS // 10,
        timeout=120,
        what="the job to get under way",
        interval=0.01,
    )
    first.send(signal.SIGKILL)
    assert first.wait_exit(10) == -signal.SIGKILL
    killed_at = BulkJob.objects.get(pk=job.pk).done
    assert killed_at < RUNS  # killed mid-job
    # A second submit of the same job (a double click) starts nothing new.
    assert bulk.submit("pause", {"agent": "ghost"}, actor="ops", key="outage-1").pk == job.pk

    cluster.worker("bulk-2")  # the sweep hands it the job once the dead worker's lease expires
    wait_until(
        lambda: BulkJob.objects.get(pk=job.pk).status == BulkJobStatus.COMPLETED,
        timeout=300,
        what="the job to complete",
    )
    elapsed = time.monotonic() - started
    operators.join(60)
    job.refresh_from_db()
    items = Counter(BulkJobItem.objects.filter(job=job).values_list("status", flat=True))
    assert items[BulkItemStatus.PENDING] == 0
    assert items[BulkItemStatus.TOUCHED] + items[BulkItemStatus.SKIPPED] == RUNS
    assert (job.touched, job.skipped) == (items["touched"], items["skipped"])
    # Exactly once: one `paused` event by the job per touched run, none for a skipped one.
    by_job = (
        Event.objects.filter(kind=EventKind.PAUSED, actor="ops", run__agent="ghost")
        .values("run_id")
        .annotate(n=Count("id"))
    )
    counts = {row["run_id"]: row["n"] for row in by_job}
    assert set(counts.values()) == {1}
    touched = set(
        BulkJobItem.objects.filter(job=job, status=BulkItemStatus.TOUCHED).values_list(
            "run_id", flat=True
        )
    )
    assert set(counts) == touched
    skipped = BulkJobItem.objects.filter(job=job, status=BulkItemStatus.SKIPPED)
    assert {item.run_id for item in skipped} <= set(chosen)
    assert all(item.detail for item in skipped)
    # Every run ended paused or cancelled: nothing was left behind or moved twice.
    assert (
        not Run.objects.filter(agent="ghost")
        .exclude(Q(status=RunStatus.PAUSED) | Q(status=RunStatus.CANCELLED))
        .exists()
    )
    assert Event.objects.filter(kind=EventKind.BULK_JOB_SUBMITTED).count() == 1
    observe(
        f"bulk pause over {RUNS} runs: worker killed after {killed_at} marked, a second "
        f"worker finished; touched={job.touched} skipped={job.skipped} (operators acted on "
        f"{acted['ok']} single runs, {acted['refused']} refused), each run once, "
        f"{elapsed:.1f}s in all"
    )

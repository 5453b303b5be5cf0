"""The writes of run surgery: pause and resume, forks, bulk jobs.

In the store's style: every transition is a guarded UPDATE whose row count says whether it
landed, its event in the same transaction; the worker's own move (a running run pausing at a
durable boundary) is a fenced transition through `store.transition`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Q

from runtime import clock, dispatch, store
from runtime.models import (
    PAUSABLE_STATUSES,
    TERMINAL_STATUSES,
    BulkItemStatus,
    BulkJob,
    BulkJobItem,
    BulkJobStatus,
    EventKind,
    InteractionStatus,
    Operation,
    Run,
    RunStatus,
    Session,
)
from runtime.store import sql
from runtime.store.dialect import connection as store_connection
from runtime.store.dialect import dialect_of

# --- pause and resume ---------------------------------------------------------------------------


def pause_now(run: Run, *, actor: str, reason: str) -> bool:
    """A run that is not running pauses at once, remembering where it was. False if it moved.

    Its retry timer (next_attempt_at) and pending interactions are kept as they are.
    """
    now = clock.now()
    with transaction.atomic():
        moved = Run.objects.by_key(
            run.pk, status=run.status, fence=run.fence, status__in=PAUSABLE_STATUSES
        ).update(
            status=RunStatus.PAUSED,
            paused_from=run.status,
            pause_requested_by=actor,
            pause_reason=reason,
            updated_at=now,
        )
        if moved != 1:
            return False
        store.event(run.pk, EventKind.PAUSED, actor, previous_status=run.status, reason=reason)
    return True


def request_pause(run: Run, *, actor: str, reason: str) -> bool:
    """Ask a running run to pause at its next durable boundary. False if it moved meanwhile."""
    with transaction.atomic():
        asked = Run.objects.by_key(
            run.pk, status=RunStatus.RUNNING, fence=run.fence, pause_requested_by=""
        ).update(pause_requested_by=actor, pause_reason=reason)
        if asked != 1:
            return False
        store.event(run.pk, EventKind.PAUSE_REQUESTED, actor, reason=reason)
    return True


def pause_requested(run: Run) -> bool:
    """The engine's check at a durable boundary: did an operator ask this claim to pause?"""
    return (
        Run.objects.by_key(run.pk, fence=run.fence, status=RunStatus.RUNNING)
        .exclude(pause_requested_by="")
        .exists()
    )


def enter_pause(run: Run) -> None:
    """The owning worker pauses its run at a durable boundary (fenced, releasing the lease).

    It returns as queued: the next claim replays the log and goes on with the next call.
    """
    asked = Run.objects.filter(pk=run.pk).values("pause_requested_by", "pause_reason").get()
    store.transition(
        run,
        RunStatus.PAUSED,
        EventKind.PAUSED,
        data={
            "previous_status": RunStatus.RUNNING,
            "requested_by": asked["pause_requested_by"],
            "reason": asked["pause_reason"],
        },
        paused_from=RunStatus.QUEUED,
    )


def settle_pause(run_id: Any) -> None:
    """After a claim: a pause requested while the run was moving takes effect on where it
    stopped (waiting, a retry timer, a block), or is dropped if the run finished."""
    # A raw read, as the worker's others: after every claim, and almost always finding nothing.
    db = store_connection()
    dialect = dialect_of(db)
    with db.wrap_database_errors, dialect.cursor(db) as cursor:
        params = {"run": dialect.run_id(db, run_id)}
        found = dialect.execute(db, cursor, sql.UNSETTLED_PAUSE, params).fetchone()
    if found is None:
        return
    row = dict(zip(("status", "fence", "pause_requested_by", "pause_reason"), found, strict=True))
    now = clock.now()
    with transaction.atomic():
        guard = Run.objects.by_key(
            run_id,
            status=row["status"],
            fence=row["fence"],
            pause_requested_by=row["pause_requested_by"],
        )
        data = {
            "previous_status": row["status"],
            "requested_by": row["pause_requested_by"],
            "reason": row["pause_reason"],
        }
        if row["status"] in TERMINAL_STATUSES:
            if guard.update(pause_requested_by="", pause_reason="") == 1:
                store.event(run_id, EventKind.PAUSE_DROPPED, **data)
            return
        landed = guard.update(status=RunStatus.PAUSED, paused_from=row["status"], updated_at=now)
        if landed == 1:
            store.event(run_id, EventKind.PAUSED, **data)


def resume_paused(run: Run, *, actor: str) -> str | None:
    """Return a paused run where it was paused; the status it returned to, None if it moved.

    A run paused while waiting whose interaction was answered meanwhile returns as queued; a
    retry timer that fell due while paused fires now.
    """
    now = clock.now()
    target = run.paused_from or RunStatus.QUEUED
    with transaction.atomic():
        if (
            target == RunStatus.WAITING
            and not run.interactions.filter(status=InteractionStatus.PENDING).exists()
        ):
            target = RunStatus.QUEUED
        moved = Run.objects.by_key(
            run.pk, status=RunStatus.PAUSED, paused_from=run.paused_from, fence=run.fence
        ).update(
            status=target,
            paused_from="",
            pause_requested_by="",
            pause_reason="",
            updated_at=now,
        )
        if moved != 1:
            return None
        store.event(run.pk, EventKind.RESUMED, actor, status=target)
        due = run.next_attempt_at is not None and run.next_attempt_at <= now
        if target == RunStatus.QUEUED or (target == RunStatus.RETRY_WAIT and due):
            dispatch.enqueue_on_commit(run.pk)
    return target


def withdraw_pause(run: Run, *, actor: str) -> bool:
    """Resume before a requested pause took effect: the run goes on. False if it moved."""
    with transaction.atomic():
        withdrawn = (
            Run.objects.by_key(run.pk, status=RunStatus.RUNNING, fence=run.fence)
            .exclude(pause_requested_by="")
            .update(pause_requested_by="", pause_reason="")
        )
        if withdrawn != 1:
            return False
        store.event(run.pk, EventKind.PAUSE_WITHDRAWN, actor)
    return True


def answered_while_paused(run_id: Any) -> bool:
    """An interaction of a run paused while waiting was answered: it will resume as queued."""
    return (
        Run.objects.by_key(run_id, status=RunStatus.PAUSED, paused_from=RunStatus.WAITING).update(
            paused_from=RunStatus.QUEUED
        )
        == 1
    )


# --- forks --------------------------------------------------------------------------------------


def create_fork(
    parent: Run,
    *,
    actor: str,
    version: str,
    fingerprint: str,
    at: str,
    context: dict[str, Any],
    reused: Sequence[Operation],
    event_data: dict[str, Any],
) -> Run:
    """The fork's session, run and reused operations, and an event on each run, at once."""
    now = clock.now()
    with transaction.atomic():
        session = Session.objects.create(
            agent=parent.agent,
            title=f"Fork of {parent.session.title or parent.session_id}"[:200],
            created_at=now,
        )
        fork = Run.objects.create(
            session=session,
            seq=1,
            agent=parent.agent,
            version=version,
            fingerprint=fingerprint,
            input=parent.input,
            parent=parent,
            fork_point=at,
            fork_context=context,
            created_at=now,
            updated_at=now,
        )
        for op in reused:
            op.pk = None
            op.run = fork
            op._state.adding = True
        Operation.objects.bulk_create(reused)
        store.event(fork.pk, EventKind.FORKED, actor, parent=str(parent.pk), at=at, **event_data)
        store.event(
            parent.pk, EventKind.FORK_CREATED, actor, fork=str(fork.pk), at=at, version=version
        )
        dispatch.enqueue_on_commit(fork.pk)
    return fork


# --- bulk jobs ----------------------------------------------------------------------------------


def create_job(
    *,
    key: str,
    action: str,
    filters: dict[str, Any],
    actor: str,
    reason: str,
    run_ids: Iterable[Any],
) -> tuple[BulkJob, bool]:
    """The job and one pending item per run, with its audit event; (job, created).

    The key is unique: a second submit of the same key returns the first job unchanged.
    """
    existing = BulkJob.objects.filter(key=key).first()
    if existing is not None:
        return existing, False
    now = clock.now()
    ids = list(run_ids)
    with transaction.atomic():
        job, created = BulkJob.objects.get_or_create(
            key=key,
            defaults={
                "action": action,
                "filters": filters,
                "actor": actor,
                "reason": reason,
                "total": len(ids),
                "created_at": now,
                "updated_at": now,
            },
        )
        if not created:
            return job, False
        BulkJobItem.objects.bulk_create(
            (BulkJobItem(job=job, run_id=run_id) for run_id in ids), batch_size=2000
        )
        store.event(
            None,
            EventKind.BULK_JOB_SUBMITTED,
            actor,
            job=str(job.pk),
            action=action,
            filters=filters,
            total=len(ids),
            reason=reason,
        )
        if not ids:
            _finish_job(job.pk, now)
    return job, True


def stop_job(job: BulkJob, *, actor: str) -> bool:
    """An operator stops a running job: its pending items stay untouched. False if it ended."""
    now = clock.now()
    with transaction.atomic():
        stopped = BulkJob.objects.filter(pk=job.pk, status=BulkJobStatus.RUNNING).update(
            status=BulkJobStatus.STOPPED, stopped_by=actor, finished_at=now, updated_at=now
        )
        if stopped != 1:
            return False
        store.event(None, EventKind.BULK_JOB_STOPPED, actor, job=str(job.pk), action=job.action)
    return True


def pending_items(job_id: Any, limit: int) -> list[BulkJobItem]:
    """The next pending items of a running job, locked for this transaction (PostgreSQL skips
    rows another worker holds; SQLite serializes writers). Inside the caller's transaction."""
    rows = BulkJobItem.objects.filter(
        job_id=job_id, status=BulkItemStatus.PENDING, job__status=BulkJobStatus.RUNNING
    ).order_by("id")
    if connection.vendor == "postgresql":
        rows = rows.select_for_update(skip_locked=True, of=("self",))
    return list(rows[:limit])


def mark_item(item: BulkJobItem, status: str, detail: str = "") -> bool:
    """Mark a pending item touched or skipped, once: False if another worker already did."""
    now = clock.now()
    return (
        BulkJobItem.objects.filter(pk=item.pk, status=BulkItemStatus.PENDING).update(
            status=status, detail=detail, done_at=now
        )
        == 1
    )


def skip_item(item: BulkJobItem, detail: str) -> None:
    """An item marked in this batch whose verb refused its run: skipped, with the reason."""
    BulkJobItem.objects.filter(pk=item.pk, status=BulkItemStatus.TOUCHED).update(
        status=BulkItemStatus.SKIPPED, detail=detail
    )


def count_items(job_id: Any, touched: int, skipped: int) -> None:
    """Add a batch's marks to the job's progress counters, in the batch's transaction."""
    BulkJob.objects.filter(pk=job_id).update(
        touched=F("touched") + touched, skipped=F("skipped") + skipped, updated_at=clock.now()
    )


def finish_if_done(job_id: Any) -> bool:
    """Complete a running job that has no pending item left. False if some are left."""
    if BulkJobItem.objects.filter(job_id=job_id, status=BulkItemStatus.PENDING).exists():
        return False
    with transaction.atomic():
        return _finish_job(job_id, clock.now())


def _finish_job(job_id: Any, now: dt.datetime) -> bool:
    return (
        BulkJob.objects.filter(pk=job_id, status=BulkJobStatus.RUNNING).update(
            status=BulkJobStatus.COMPLETED, finished_at=now, updated_at=now
        )
        == 1
    )


def claim_job(job_id: Any, owner: str, *, seconds: float) -> BulkJob | None:
    """Take a running job no worker holds (or whose worker's lease expired); None otherwise."""
    now = clock.now()
    taken = (
        BulkJob.objects.filter(pk=job_id, status=BulkJobStatus.RUNNING)
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
        .update(
            lease_owner=owner,
            lease_expires_at=now + dt.timedelta(seconds=seconds),
            updated_at=now,
        )
    )
    return BulkJob.objects.get(pk=job_id) if taken == 1 else None


def renew_job(job: BulkJob, *, seconds: float) -> bool:
    """Keep the job's lease between batches. False once it was stopped, finished or taken."""
    now = clock.now()
    return (
        BulkJob.objects.filter(
            pk=job.pk, status=BulkJobStatus.RUNNING, lease_owner=job.lease_owner
        ).update(lease_expires_at=now + dt.timedelta(seconds=seconds))
        == 1
    )


def release_job(job: BulkJob) -> None:
    BulkJob.objects.filter(pk=job.pk, lease_owner=job.lease_owner).update(
        lease_owner="", lease_expires_at=None
    )

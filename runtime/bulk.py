"""Bulk actions by filter: retry, cancel, pause or resume every run a filter matches, as a job.

The preview counts, per action, the runs it would touch and lists the ones it cannot touch and
why — the same rules as for one run. Submitting fixes the touchable runs as the job's items;
workers take the pending items in batches, each batch one transaction in which every item's
verb and its mark commit together, so a worker killed mid-batch leaves its batch untouched for
the next one and every run is touched exactly once. A run that changed meanwhile (an operator
acted on it alone) is skipped with the verb's reason. Each run's verb writes that run's audit
entry; the job writes its own.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError, field_validator

from runtime import clock, control, dispatch, jsonvalues, store, surgery
from runtime.control import _actor, _get, _text
from runtime.errors import AgentOpsError, InvalidInput, InvalidTransition
from runtime.models import (
    UNFINISHED_STATUSES,
    BulkAction,
    BulkItemStatus,
    BulkJob,
    BulkJobStatus,
    Operation,
    Run,
    RunStatus,
)
from runtime.store import surgery as surgery_store

ACTIONS = tuple(BulkAction.values)
# Items per transaction: small enough that an operator acting on one run waits little for a
# batch's row locks, large enough that 10,000 runs are a few dozen commits.
BATCH = 200
# The preview lists this many refused runs (the counts cover them all).
REFUSED_SAMPLE = 20


class RunFilter(BaseModel):
    """The runs list's filters: every given one must match."""

    model_config = ConfigDict(extra="forbid", strict=True)
    status: list[str] = []
    agent: str = ""
    version: str = ""
    created_from: AwareDatetime | None = None
    created_to: AwareDatetime | None = None
    # Text in the run's error (case-insensitive).
    error: str = ""
    # The tool of the operation the run is blocked on.
    tool: str = ""

    @field_validator("status")
    @classmethod
    def _statuses(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(RunStatus.values))
        if unknown:
            raise ValueError(f"unknown status {', '.join(unknown)}")
        return sorted(set(value))

    @field_validator("created_from", "created_to")
    @classmethod
    def _utc(cls, value: dt.datetime | None) -> dt.datetime | None:
        # In UTC: PostgreSQL refuses offsets beyond ±15:59 that Python accepts.
        if value is None:
            return None
        try:
            return value.astimezone(dt.UTC)
        except OverflowError:
            raise ValueError("the time is out of range") from None

    @field_validator("agent", "version", "error", "tool")
    @classmethod
    def _text(cls, value: str) -> str:
        return jsonvalues.check_text(value.strip(), what="filter", max_length=200)


def parse_filter(value: Any) -> RunFilter:
    """The filter from JSON-like data (strings for times are ISO 8601), or InvalidInput."""
    if isinstance(value, RunFilter):
        return value
    if not isinstance(value, dict):
        raise InvalidInput("the filter must be an object")
    try:
        return RunFilter.model_validate(value, strict=False)
    except ValidationError as exc:
        problems = [f"{'.'.join(map(str, e['loc'])) or 'filter'}: {e['msg']}" for e in exc.errors()]
        raise InvalidInput("invalid filter: " + "; ".join(problems), problems) from None


def matching(run_filter: RunFilter) -> QuerySet[Run]:
    """The runs the filter matches, oldest first."""
    rows = Run.objects.all()
    if run_filter.status:
        rows = rows.filter(status__in=run_filter.status)
    if run_filter.agent:
        rows = rows.filter(agent=run_filter.agent)
    if run_filter.version:
        rows = rows.filter(version=run_filter.version)
    if run_filter.created_from:
        rows = rows.filter(created_at__gte=run_filter.created_from)
    if run_filter.created_to:
        rows = rows.filter(created_at__lt=run_filter.created_to)
    if run_filter.error:
        rows = rows.filter(error__icontains=run_filter.error)
    if run_filter.tool:
        blocked_on = Operation.objects.filter(
            run=OuterRef("pk"), key=OuterRef("blocked_operation"), name=run_filter.tool
        )
        rows = rows.exclude(blocked_operation="").filter(Exists(blocked_on))
    return rows.order_by("created_at", "id")


def _cancel_problem(run: Run) -> str | None:
    if run.status not in UNFINISHED_STATUSES:
        return f"it is {run.status}; only unfinished runs can be cancelled"
    return None


# action -> why one run would be refused (None: it would be touched); the verbs' own checks.
PROBLEMS: dict[str, Callable[[Run], str | None]] = {
    BulkAction.RETRY: control.retry_problem,
    BulkAction.CANCEL: _cancel_problem,
    BulkAction.PAUSE: surgery.pause_problem,
    BulkAction.RESUME: surgery.resume_problem,
}


@dataclass
class ActionPreview:
    """What one action would do to the matching runs."""

    action: str
    touch: int = 0
    refused: int = 0
    # Why runs would be refused, with how many each.
    reasons: dict[str, int] = field(default_factory=dict)
    # A few refused runs with their reason.
    examples: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class BulkPreview:
    matched: int
    actions: dict[str, ActionPreview]


def _reason_kind(problem: str) -> str:
    # The same refusal for many runs differs only by ids in parentheses: group on the rest.
    head = problem.split(" (", 1)[0]
    return head if len(head) < len(problem) else problem


def preview(filters: Any) -> BulkPreview:
    """How many matching runs each action would touch, which it cannot and why."""
    run_filter = parse_filter(filters)
    actions = {action: ActionPreview(action) for action in ACTIONS}
    matched = 0
    for run in matching(run_filter).iterator(chunk_size=2000):
        matched += 1
        for action, shown in actions.items():
            problem = PROBLEMS[action](run)
            if problem is None:
                shown.touch += 1
                continue
            shown.refused += 1
            kind = _reason_kind(problem)
            shown.reasons[kind] = shown.reasons.get(kind, 0) + 1
            if len(shown.examples) < REFUSED_SAMPLE:
                shown.examples.append((str(run.pk), problem))
    return BulkPreview(matched=matched, actions=actions)


def submit(
    action: str, filters: Any, *, actor: str, key: str | None = None, reason: str = ""
) -> BulkJob:
    """Start a job doing `action` to every matching run the action can touch now.

    `key` makes a submit idempotent: the same key again returns the first job (whatever it
    was asked). Runs that cannot be touched are left out (the preview says why); a run that
    changes before its turn is skipped with the reason. The job is handed to the workers.
    """
    actor = _actor(actor)
    if action not in ACTIONS:
        raise InvalidInput(f"the action must be one of {', '.join(ACTIONS)}")
    run_filter = parse_filter(filters)
    key = _text(key, "key", 100) if key is not None else str(uuid.uuid4())
    reason = surgery._reason(reason)
    problem = PROBLEMS[action]
    touchable = (
        run.pk for run in matching(run_filter).iterator(chunk_size=2000) if problem(run) is None
    )
    job, created = surgery_store.create_job(
        key=key,
        action=action,
        filters=run_filter.model_dump(mode="json"),
        actor=actor,
        reason=reason,
        run_ids=touchable,
    )
    if created and job.status == BulkJobStatus.RUNNING:
        dispatch.enqueue_job_on_commit(job.pk)
    return job


def stop(job_id: Any, *, actor: str) -> BulkJob:
    """Stop a running job: the batch in progress finishes, no further item is taken."""
    actor = _actor(actor)
    job = _get(BulkJob, job_id)
    if not surgery_store.stop_job(job, actor=actor):
        job.refresh_from_db()
        raise InvalidTransition(f"bulk job {job.pk} is {job.status}; it cannot be stopped")
    job.refresh_from_db()
    return job


def _apply(job: BulkJob, run_id: Any) -> None:
    reason = f"bulk job {job.pk}" + (f": {job.reason}" if job.reason else "")
    if job.action == BulkAction.RETRY:
        control.retry(run_id, actor=job.actor)
    elif job.action == BulkAction.CANCEL:
        control.cancel(run_id, actor=job.actor, reason=reason)
    elif job.action == BulkAction.PAUSE:
        surgery.pause(run_id, actor=job.actor, reason=reason)
    else:
        surgery.resume_run(run_id, actor=job.actor)


def work_batch(job: BulkJob, *, batch: int = BATCH) -> int:
    """One batch of the job's pending items in one transaction: the items it marked (0 when
    none is left or the job was stopped). Each item's verb and its mark commit together."""
    with transaction.atomic():
        items = surgery_store.pending_items(job.pk, batch)
        touched = skipped = 0
        for item in items:
            if not surgery_store.mark_item(item, BulkItemStatus.TOUCHED):
                continue
            try:
                # A savepoint: a refused verb leaves nothing behind, the batch goes on.
                with transaction.atomic():
                    _apply(job, item.run_id)
            except AgentOpsError as exc:
                surgery_store.skip_item(item, exc.message)
                skipped += 1
            else:
                touched += 1
        surgery_store.count_items(job.pk, touched, skipped)
    return len(items)


def work(job_id: Any, *, owner: str, batch: int = BATCH) -> int:
    """Take the job (its lease) and work its batches until none is left or it is stopped; the
    items marked. Returns 0 at once if another worker holds it."""
    job = surgery_store.claim_job(job_id, owner, seconds=store.lease_seconds())
    if job is None:
        return 0
    done = 0
    while True:
        marked = work_batch(job, batch=batch)
        done += marked
        if not marked or not surgery_store.renew_job(job, seconds=store.lease_seconds()):
            break
    surgery_store.finish_if_done(job.pk)
    surgery_store.release_job(job)
    return done


def stalled_job_ids() -> list[str]:
    """Running jobs no worker holds (never taken, or their worker died): the sweep's query."""
    now = clock.now()
    return [
        str(pk)
        for pk in BulkJob.objects.filter(status=BulkJobStatus.RUNNING)
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
        .values_list("pk", flat=True)
    ]


__all__ = [
    "ACTIONS",
    "BulkPreview",
    "RunFilter",
    "matching",
    "preview",
    "stalled_job_ids",
    "stop",
    "submit",
    "work",
    "work_batch",
]

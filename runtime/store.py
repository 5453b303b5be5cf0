"""Persistence in one place: claims, fenced writes, guarded transitions and the sweep queries.

Every transition is a guarded UPDATE whose row count says whether it landed. A worker's writes
go through `fenced()`, which first bumps the run's lease with `WHERE fence = <ours> AND status =
'running'`: on PostgreSQL that UPDATE also takes the run's row lock, so a takeover (which bumps
the fence under the same lock) is ordered strictly before or after each write, never between
the check and the write. On SQLite every transaction is IMMEDIATE, so writers are serialized.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q

from agentops.models import (
    Event,
    Interaction,
    InteractionStatus,
    Operation,
    OperationStatus,
    Run,
    RunStatus,
)
from runtime import clock, dispatch, faults
from runtime.errors import LeaseLost

RUNTIME = "runtime"


def lease_seconds() -> float:
    return float(settings.AGENTOPS_LEASE_SECONDS)


def event(run_id: Any, kind: str, actor: str = RUNTIME, key: str = "", **data: Any) -> Event:
    """Append one event; live updates go out after the surrounding transaction commits."""
    created = Event.objects.create(
        run_id=run_id, kind=kind, actor=actor, operation_key=key, data=data, created_at=clock.now()
    )
    dispatch.publish_on_commit(created)
    return created


# --- claim ----------------------------------------------------------------------------------


def runnable(now: dt.datetime) -> Q:
    """Runs a worker may claim now: queued, a running one whose lease expired, a due timer."""
    return (
        Q(status=RunStatus.QUEUED)
        | Q(status=RunStatus.RUNNING, lease_expires_at__lt=now)
        | Q(status=RunStatus.RETRY_WAIT, next_attempt_at__lte=now)
    )


def claim(run_id: Any, owner: str) -> Run | None:
    """Take the run for `owner` with a fresh lease and fence, or None if it is not claimable.

    Optimistic: read the run, then UPDATE guarded on the status and fence read, so of two
    workers delivered the same run exactly one lands, and the winner knows what it took over.
    """
    now = clock.now()
    seen = (
        Run.objects.filter(runnable(now), pk=run_id)
        .values("status", "fence", "lease_owner")
        .first()
    )
    if seen is None:
        return None
    with transaction.atomic():
        landed = Run.objects.filter(pk=run_id, status=seen["status"], fence=seen["fence"]).update(
            status=RunStatus.RUNNING,
            lease_owner=owner,
            lease_expires_at=now + dt.timedelta(seconds=lease_seconds()),
            fence=F("fence") + 1,
            next_attempt_at=None,
            updated_at=now,
        )
        if landed != 1:
            return None
        if seen["status"] == RunStatus.RUNNING:
            event(run_id, "lease_expired", previous_owner=seen["lease_owner"], owner=owner)
        event(run_id, "claimed", owner=owner, fence=seen["fence"] + 1)
    return Run.objects.select_related("session").get(pk=run_id)


# --- fenced writes of the owning worker ----------------------------------------------------------


@contextmanager
def fenced(run: Run) -> Iterator[None]:
    """A transaction that commits only while `run` is still ours; renews the lease as it goes."""
    with transaction.atomic():
        now = clock.now()
        held = Run.objects.filter(pk=run.pk, fence=run.fence, status=RunStatus.RUNNING).update(
            lease_expires_at=now + dt.timedelta(seconds=lease_seconds()), updated_at=now
        )
        if held != 1:
            raise LeaseLost(run.pk)
        yield


def renew(run: Run) -> None:
    """The heartbeat: keep the lease alive during a long call. Raises LeaseLost if taken over."""
    with fenced(run):
        pass


def write_intent(
    run: Run,
    existing: Operation | None,
    *,
    key: str,
    kind: str,
    name: str,
    policy: str,
    input: dict[str, Any],
    input_hash: str,
) -> Operation:
    """Write 1 of 2: the operation's full input, committed before it is dispatched."""
    now = clock.now()
    with fenced(run):
        if existing is None:
            op = Operation.objects.create(
                run=run,
                key=key,
                kind=kind,
                name=name,
                policy=policy,
                status=OperationStatus.STARTED,
                input=input,
                input_hash=input_hash,
                attempts=1,
                intent_at=now,
            )
        else:
            op = existing
            op.status, op.attempts, op.intent_at = OperationStatus.STARTED, op.attempts + 1, now
            op.error, op.outcome_at = "", None
            Operation.objects.filter(pk=op.pk).update(
                status=op.status, attempts=op.attempts, intent_at=now, error="", outcome_at=None
            )
        event(run.pk, "intent", key=key, call=kind, name=name, attempt=op.attempts)
    return op


def write_outcome(
    run: Run,
    op: Operation,
    *,
    status: str,
    result: Any = None,
    is_error: bool = False,
    error: str = "",
    usage: dict[str, Any] | None = None,
) -> None:
    """Write 2 of 2: the normalized result (or error), atomically with its event."""
    now = clock.now()
    with fenced(run):
        Operation.objects.filter(pk=op.pk).update(
            status=status,
            result=result,
            is_error=is_error,
            error=error,
            usage=usage,
            outcome_at=now,
        )
        event(
            run.pk,
            "outcome",
            key=op.key,
            call=op.kind,
            name=op.name,
            status=status,
            is_error=is_error,
            error=error,
        )
        faults.reach("during_outcome", run, op.key, op.name)
    op.status, op.result, op.is_error, op.error, op.usage, op.outcome_at = (
        status,
        result,
        is_error,
        error,
        usage,
        now,
    )


def record(
    run: Run,
    *,
    key: str,
    name: str,
    policy: str,
    input: dict[str, Any],
    input_hash: str,
    status: str,
    result: Any,
    is_error: bool,
) -> Operation:
    """An operation decided without a call (a rejection, an answer): intent and outcome at once."""
    now = clock.now()
    with fenced(run):
        op = Operation.objects.create(
            run=run,
            key=key,
            kind="tool",
            name=name,
            policy=policy,
            status=status,
            input=input,
            input_hash=input_hash,
            result=result,
            is_error=is_error,
            intent_at=now,
            outcome_at=now,
        )
        event(run.pk, "outcome", key=key, call="tool", name=name, status=status, is_error=is_error)
    return op


def transition(
    run: Run,
    status: str,
    kind: str,
    *,
    key: str = "",
    data: dict[str, Any] | None = None,
    **fields: Any,
) -> None:
    """Move the owned run out of `running` (done, failed, waiting, …), releasing the lease."""
    now = clock.now()
    with fenced(run):
        Run.objects.filter(pk=run.pk).update(
            status=status, lease_owner="", lease_expires_at=None, updated_at=now, **fields
        )
        event(run.pk, kind, key=key, **(data or {}))
    run.status = status


def request_interaction(
    run: Run, *, key: str, kind: str, tool_name: str, payload: dict[str, Any]
) -> Interaction:
    """Ask a person; the run waits. Written before the tool's intent."""
    now = clock.now()
    with fenced(run):
        interaction = Interaction.objects.create(
            run=run,
            operation_key=key,
            kind=kind,
            tool_name=tool_name,
            payload=payload,
            created_at=now,
        )
        Run.objects.filter(pk=run.pk).update(
            status=RunStatus.WAITING, lease_owner="", lease_expires_at=None, updated_at=now
        )
        event(run.pk, f"{kind}_requested", key=key, interaction=str(interaction.pk), tool=tool_name)
    run.status = RunStatus.WAITING
    return interaction


# --- recovery queries --------------------------------------------------------------------------


def due_run_ids(limit: int = 500) -> list[Any]:
    """Runs a worker should pick up now: the sweep's and the startup discovery's query."""
    return list(
        Run.objects.filter(runnable(clock.now()))
        .order_by("updated_at")
        .values_list("pk", flat=True)[:limit]
    )


def pending_interactions(run: Run) -> Any:
    return Interaction.objects.filter(run=run, status=InteractionStatus.PENDING)

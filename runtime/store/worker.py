"""The writes of the worker that owns a run: the claim, the two records of every call, the
run's move out of `running`, a question to a person, and the heartbeat.

Every write is fenced: it lands only while the run is `running` under the claim's fence, and
renews the lease as it goes; otherwise it raises LeaseLost having written nothing. Events are
published after commit, as Event instances built from the returned ids.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field

from runtime import clock, faults
from runtime.errors import LeaseLost
from runtime.models import (
    EventKind,
    Interaction,
    Operation,
    OperationKind,
    OperationStatus,
    Run,
    RunStatus,
)
from runtime.store import sql, transitions
from runtime.store.dialect import Dialect, connection, dialect_of
from runtime.store.events import Written, event, publish, published


def lease_seconds() -> float:
    return float(settings.AGENTOPS_LEASE_SECONDS)


def _lease(now: dt.datetime) -> dt.datetime:
    return now + dt.timedelta(seconds=lease_seconds())


# --- the claim ---------------------------------------------------------------------------------


def claim(run_id: Any, owner: str) -> Run | None:
    """Take the run for `owner` with a fresh lease and fence, or None if it is not claimable.

    Optimistic: read the run (if runnable), then UPDATE guarded on the status and fence read,
    so of two workers delivered the same run exactly one lands, and the winner knows what it
    took over.
    """
    now = clock.now()
    db = connection()
    dialect = dialect_of(db)
    params = {
        "run": dialect.run_id(db, run_id),
        "now": dialect.moment(db, now),
        "lease": dialect.moment(db, _lease(now)),
        "owner": owner,
    }
    with db.wrap_database_errors, dialect.cursor(db) as cursor:
        seen = dialect.execute(db, cursor, sql.SEEN, params).fetchone()
    if seen is None:
        return None
    status, fence, previous_owner = seen
    transitions.check([status], RunStatus.RUNNING)
    lost = f"the worker {previous_owner} lost the run: its lease expired (it died or stalled)"
    params.update(status=status, fence=fence, lost=lost)
    written = [Written(run_id, EventKind.CLAIMED, "", {"owner": owner, "fence": fence + 1}, now)]
    if status == RunStatus.RUNNING:
        data = {"previous_owner": previous_owner, "owner": owner}
        written.insert(0, Written(run_id, EventKind.LEASE_EXPIRED, "", data, now))
    with dialect.transaction(db) as cursor:
        if dialect.execute(db, cursor, sql.CLAIM, params).rowcount != 1:
            return None
        ids = [dialect.insert_event(db, cursor, each.params(db, dialect)) for each in written]
    for event_id, each in zip(ids, written, strict=True):
        published(db, event_id, each)
    return Run.objects.select_related("session").get(pk=run_id)


# --- the fence ---------------------------------------------------------------------------------


@contextmanager
def _carried_fence(run: Run) -> Iterator[tuple[int, str]]:
    """What a write requires of the run: the claim's fence, while it is running; a test
    harness's fence hook may say otherwise (runtime.testing.fence_hook)."""
    hook = faults.fence
    if hook is None:
        yield run.fence, RunStatus.RUNNING
    else:
        with hook(run) as carried:
            yield carried


def renew(run: Run) -> None:
    """The heartbeat: keep the lease alive during a long call. Raises LeaseLost if taken over."""
    with _carried_fence(run) as (fence, held):
        now = clock.now()
        renewed = Run.objects.filter(pk=run.pk, fence=fence, status=held).update(
            lease_expires_at=_lease(now), updated_at=now
        )
        if renewed != 1:
            raise LeaseLost(run.pk)


def still_running(run_id: Any, fence: int) -> bool:
    """Whether the claim with `fence` still holds the run: False once it was cancelled or taken
    over (cancel bumps the fence too). One primary-key read, cheap enough to poll."""
    return Run.objects.filter(pk=run_id, fence=fence, status=RunStatus.RUNNING).exists()


@contextmanager
def _record(
    run: Run, now: dt.datetime, *, atomic: bool
) -> Iterator[tuple[BaseDatabaseWrapper, Dialect, Any, dict[str, Any]]]:
    """The frame of one fenced record: the database, its dialect, a DB-API cursor and the
    fence's parameters. `atomic=False` lets a record that is one statement commit alone."""
    db = connection()
    dialect = dialect_of(db)
    with _carried_fence(run) as (fence, held):
        params = {
            "run": dialect.run_id(db, run.pk),
            "fence": fence,
            "held": held,
            "lease": dialect.moment(db, _lease(now)),
            "now": dialect.moment(db, now),
        }
        if atomic or not dialect.one_statement or db.in_atomic_block:
            with dialect.transaction(db) as cursor:
                yield db, dialect, cursor, params
        else:
            with db.wrap_database_errors, dialect.cursor(db) as cursor:
                yield db, dialect, cursor, params


# --- the two records of a call ------------------------------------------------------------------


def _insert_operation(
    run: Run, now: dt.datetime, *, event_kind: EventKind, data: dict[str, Any], **fields: Any
) -> Operation:
    """A new operation row and its event, fenced; the Operation as `objects.create` returns it."""
    with _record(run, now, atomic=False) as (db, dialect, cursor, params):
        params.update(
            key=fields["key"],
            kind=fields["kind"],
            name=fields["name"],
            policy=fields["policy"],
            status=fields["status"],
            input=dialect.json(db, fields["input"]),
            input_hash=fields["input_hash"],
            result=dialect.json(db, fields.get("result")),
            is_error=fields.get("is_error", False),
            outcome_at=dialect.moment(db, fields.get("outcome_at")),
            event=event_kind,
            data=dialect.json(db, data),
        )
        written = dialect.new_operation(db, cursor, params)
        if written is None:
            raise LeaseLost(run.pk)
    event_id, operation_id = written
    publish(db, event_id, Written(run.pk, event_kind, fields["key"], data, now))
    op = Operation(id=operation_id, run=run, attempts=1, intent_at=now, **fields)
    op._state.adding = False
    op._state.db = db.alias
    return op


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
    rerun: str = "",
) -> Operation:
    """Write 1 of 2: the operation's full input, committed before it is dispatched.

    `rerun` says, in the intent's event, why an operation with an earlier intent runs again.
    """
    now = clock.now()
    if existing is None:
        return _insert_operation(
            run,
            now,
            event_kind=EventKind.INTENT,
            data={"call": kind, "name": name, "attempt": 1},
            key=key,
            kind=kind,
            name=name,
            policy=policy,
            status=OperationStatus.STARTED,
            input=input,
            input_hash=input_hash,
        )
    attempts = existing.attempts + 1
    data: dict[str, Any] = {"call": kind, "name": name, "attempt": attempts}
    if rerun:
        data["rerun"] = rerun
    with _record(run, now, atomic=False) as (db, dialect, cursor, params):
        params.update(
            op=existing.pk,
            attempts=attempts,
            key=key,
            event=EventKind.INTENT,
            data=dialect.json(db, data),
        )
        event_id = dialect.update_operation(db, cursor, "reintent", params)
        if event_id is None:
            raise LeaseLost(run.pk)
    publish(db, event_id, Written(run.pk, EventKind.INTENT, key, data, now))
    op = existing
    op.status, op.attempts, op.intent_at = OperationStatus.STARTED, attempts, now
    op.error, op.outcome_at = "", None
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
    data = {
        "call": op.kind,
        "name": op.name,
        "status": status,
        "is_error": is_error,
        "error": error,
    }
    # A transaction of its own even where the record is one statement: the crash window
    # "during_outcome" sits inside it, after the statement, and must roll it back whole.
    with _record(run, now, atomic=True) as (db, dialect, cursor, params):
        params.update(
            op=op.pk,
            status=status,
            result=dialect.json(db, result),
            is_error=is_error,
            error=error,
            usage=dialect.json(db, usage),
            key=op.key,
            event=EventKind.OUTCOME,
            data=dialect.json(db, data),
        )
        event_id = dialect.update_operation(db, cursor, "outcome", params)
        if event_id is None:
            raise LeaseLost(run.pk)
        # Model requests are reached as "model" at every window, as the harness targets them.
        faults.reach("during_outcome", run, op.key, _operation_name(op))
    publish(db, event_id, Written(run.pk, EventKind.OUTCOME, op.key, data, now))
    op.status, op.result, op.is_error, op.error, op.usage, op.outcome_at = (
        status,
        result,
        is_error,
        error,
        usage,
        now,
    )


def _operation_name(op: Operation) -> str:
    return "model" if op.kind == OperationKind.MODEL else op.name


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
    return _insert_operation(
        run,
        now,
        event_kind=EventKind.OUTCOME,
        data={"call": OperationKind.TOOL, "name": name, "status": status, "is_error": is_error},
        key=key,
        kind=OperationKind.TOOL,
        name=name,
        policy=policy,
        status=status,
        input=input,
        input_hash=input_hash,
        result=result,
        is_error=is_error,
        outcome_at=now,
    )


# --- the run's move out of `running` -------------------------------------------------------------


def transition(
    run: Run,
    status: str,
    kind: EventKind,
    *,
    key: str = "",
    data: dict[str, Any] | None = None,
    **fields: Any,
) -> None:
    """Move the owned run out of `running` (done, failed, waiting, …), releasing the lease.

    The claim ended cleanly: its crash count is reset, and the last model error's kind is
    cleared, unless `fields` set them.
    """
    transitions.check([RunStatus.RUNNING], status)
    now = clock.now()
    data = data or {}
    fields = {"crashed_claims": 0, "error_kind": "", **fields}
    assignments = [
        "status = %(status)s",
        "lease_owner = ''",
        "lease_expires_at = NULL",
        "updated_at = %(now)s",
    ]
    with _record(run, now, atomic=False) as (db, dialect, cursor, params):
        params.update(status=status, key=key, event=kind, data=dialect.json(db, data))
        for name, value in fields.items():
            field = Run._meta.get_field(name)
            assert isinstance(field, Field)  # the run's own columns, never a relation
            assignments.append(f"{field.column} = %(f_{name})s")
            params[f"f_{name}"] = field.get_db_prep_save(value, db)
        event_id = dialect.move_owned(db, cursor, ", ".join(assignments), params)
        if event_id is None:
            raise LeaseLost(run.pk)
    publish(db, event_id, Written(run.pk, kind, key, data, now))
    run.status = status


def request_interaction(
    run: Run, *, key: str, kind: str, tool_name: str, payload: dict[str, Any]
) -> Interaction:
    """Ask a person; the run waits. Written before the tool's intent."""
    transitions.check([RunStatus.RUNNING], RunStatus.WAITING)
    now = clock.now()
    with _carried_fence(run) as (fence, held), transaction.atomic():
        # The move is the fence: it lands only while the run is ours.
        moved = Run.objects.filter(pk=run.pk, fence=fence, status=held).update(
            status=RunStatus.WAITING,
            lease_owner="",
            lease_expires_at=None,
            crashed_claims=0,
            error_kind="",
            updated_at=now,
        )
        if moved != 1:
            raise LeaseLost(run.pk)
        interaction = Interaction.objects.create(
            run=run,
            operation_key=key,
            kind=kind,
            tool_name=tool_name,
            payload=payload,
            created_at=now,
        )
        event(
            run.pk,
            EventKind.requested(kind),
            key=key,
            interaction=str(interaction.pk),
            tool=tool_name,
        )
    run.status = RunStatus.WAITING
    return interaction


def expire_lease(run_id: Any) -> None:
    """What the passing of time does to a dead worker's lease: it runs out now (the crash
    harness's recovery, runtime.testing.recover)."""
    Run.objects.filter(pk=run_id, status=RunStatus.RUNNING).update(
        lease_expires_at=clock.now() - dt.timedelta(seconds=1)
    )

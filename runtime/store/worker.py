"""The writes of the worker that owns a run: the claim, the two records of every call, the
run's move out of `running`, a question to a person, and the heartbeat.

Every write is fenced: it lands only while the run is `running` under the claim's fence;
otherwise it raises LeaseLost having written nothing. The claim sets the lease and the
heartbeat renews it; records do not. Events are published after commit, as Event instances
built from the returned ids.

One commit per call (DESIGN): an outcome may be held (`write_outcome(..., hold=True)`) and is
then carried by the run's next fenced record — the next call's intent, a record, the move out
of `running` — in the same commit; runtime/faults.py says where each crash window lies.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, NoReturn

from django.conf import settings
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field

from runtime import clock, faults
from runtime.errors import LeaseLost, PauseRequested
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
from runtime.store.dialect import Dialect, built, connection, dialect_of
from runtime.store.events import Written, event, published, publishing


def lease_seconds() -> float:
    return float(settings.AGENTOPS_LEASE_SECONDS)


def _lease(now: dt.datetime) -> dt.datetime:
    return now + dt.timedelta(seconds=lease_seconds())


# --- the claim ---------------------------------------------------------------------------------


def claim(run_id: Any, owner: str) -> Run | None:
    """Take the run for `owner` with a fresh lease and fence, or None if it is not claimable.

    Optimistic: read the run (if runnable), then UPDATE guarded on the status and fence read,
    so of two workers delivered the same run exactly one lands, and the winner knows what it
    took over. On PostgreSQL the read, the write and its events are one statement; on SQLite,
    a read, then the write and its events in one transaction (the dialects).
    """
    db = connection()
    dialect = dialect_of(db)
    now = clock.now()  # once connected: a wait for the connection is not the claim's
    params = {
        "run": dialect.run_id(db, run_id),
        "now": dialect.moment(db, now),
        "lease": dialect.moment(db, _lease(now)),
        "owner": owner,
        "lost": sql.LOST,
        "expired": EventKind.LEASE_EXPIRED,
        "claimed": EventKind.CLAIMED,
    }
    taken = dialect.claim(db, params)
    if taken is None:
        return None
    status, fence, previous_owner, ids, row = taken
    transitions.check([status], RunStatus.RUNNING)  # the claim's RUNNABLE allows it
    run = _claimed_run(db, dialect, row)
    # Dated as the dialect dated it: `now`, or the run's last move if that came after it.
    written = _claim_events(
        run_id, owner, run.updated_at, status=status, fence=fence, previous_owner=previous_owner
    )
    for event_id, each in zip(ids, written, strict=True):
        published(db, event_id, each)
    return run


def _claim_events(
    run_id: Any, owner: str, now: dt.datetime, *, status: str, fence: int, previous_owner: str
) -> list[Written]:
    """A claim's events, in log order, as published (each dialect's claim writes the same)."""
    written = [Written(run_id, EventKind.CLAIMED, "", {"owner": owner, "fence": fence + 1}, now)]
    if status == RunStatus.RUNNING:
        data = {"previous_owner": previous_owner, "owner": owner}
        written.insert(0, Written(run_id, EventKind.LEASE_EXPIRED, "", data, now))
    return written


def _claimed_run(db: BaseDatabaseWrapper, dialect: Dialect, row: Sequence[Any]) -> Run:
    """The claimed run from the claim's row (sql.CLAIMED_RUN_COLUMNS), with whether it has
    operations and interactions logged (a run's first claim has neither, and the turn then
    skips reading them: two round trips), the fingerprint its version is registered with, for
    the turn's version check, and whether its agent has approval rules to read. Read by the
    claim itself: the ORM's query cost more Python than a call's records, and on PostgreSQL a
    read of its own cost a round trip."""
    *columns, has_operations, has_interactions, registered_fingerprint, has_rules = row
    run = dialect.instance(db, Run, columns)
    run.__dict__.update(
        has_operations=bool(has_operations),
        has_interactions=bool(has_interactions),
        registered_fingerprint=registered_fingerprint,
        has_rules=bool(has_rules),
    )
    return run


# --- the fence ---------------------------------------------------------------------------------


def _carried_fence(run: Run) -> AbstractContextManager[tuple[int, str]]:
    """What a write requires of the run: the claim's fence, while it is running; a test
    harness's fence hook may say otherwise (runtime.testing.fence_hook)."""
    hook = faults.fence
    return nullcontext((run.fence, RunStatus.RUNNING)) if hook is None else hook(run)


def renew(run: Run) -> None:
    """The heartbeat's renewal of the claim's lease, the only one (records do not renew it).
    Raises LeaseLost if taken over."""
    with _carried_fence(run) as (fence, held):
        now = clock.now()
        # The lease alone: updated_at stays the run's last move, and no indexed column changes
        # (a HOT update on PostgreSQL; Run.Meta says why).
        renewed = Run.objects.by_key(run.pk, fence=fence, status=held).update(
            lease_expires_at=_lease(now)
        )
        if renewed != 1:
            raise LeaseLost(run.pk)


def still_running(run_id: Any, fence: int) -> bool:
    """Whether the claim with `fence` still holds the run: False once it was cancelled or taken
    over (cancel bumps the fence too). One primary-key read, cheap enough to poll."""
    return Run.objects.by_key(run_id, fence=fence, status=RunStatus.RUNNING).exists()


# --- the fold: a held outcome, carried by the next record ----------------------------------------

# Where a run keeps its held outcome: on the Run instance of the claim that holds it, so that
# it goes with that claim alone (two claims of one run are two instances).
_HELD = "_held_outcome"


@dataclass(frozen=True)
class _Held:
    """An outcome written but not committed: the run's next fenced record carries it."""

    op: Operation
    status: str
    result: Any
    is_error: bool
    error: str
    usage: dict[str, Any] | None
    written: Written

    def params(self, db: BaseDatabaseWrapper, dialect: Dialect) -> dict[str, Any]:
        """The outcome's statement parameters, prefixed `p_`: built by the record that carries
        it, on that record's connection."""
        return {
            "p_op": self.op.pk,
            "p_status": self.status,
            "p_result": dialect.json(db, self.result),
            "p_is_error": self.is_error,
            "p_error": self.error,
            "p_usage": dialect.json(db, self.usage),
            "p_key": self.op.key,
            "p_event": EventKind.OUTCOME,
            "p_data": dialect.json(db, self.written.data),
            "p_now": dialect.moment(db, self.written.now),
        }


def _take_held(run: Run) -> _Held | None:
    # Taken before the record that carries it runs: if that record fails, the outcome is lost
    # with it, as a crash after the handler loses it, and nothing carries it twice.
    held: _Held | None = run.__dict__.pop(_HELD, None)
    return held


def settle(run: Run) -> None:
    """Commit the run's held outcome alone, if it holds one: before a write that does not
    carry it (a question to a person, an outcome that commits alone)."""
    held = _take_held(run)
    if held is not None:
        now = held.written.now
        with _record(run, now, atomic=True, carrying=held) as (db, dialect, cursor, params):
            params.update({name[2:]: value for name, value in params.items() if name[:2] == "p_"})
            ids = dialect.update_operation(db, cursor, "outcome", params, carried=False)
            if ids is None:
                raise LeaseLost(run.pk)
        _published(run, db, held, ids, [])


@contextmanager
def _record(
    run: Run, now: dt.datetime, *, atomic: bool, carrying: _Held | None
) -> Iterator[tuple[BaseDatabaseWrapper, Dialect, Any, dict[str, Any]]]:
    """The frame of one fenced record: the database, its dialect, a DB-API cursor and the
    fence's parameters (with the held outcome's, if it carries one). A record that is one
    statement commits alone (autocommit) unless `atomic` or a crash can be injected inside it.
    """
    db = connection()
    dialect = dialect_of(db)
    with _carried_fence(run) as (fence, held):
        params = {
            "run": dialect.run_id(db, run.pk),
            "fence": fence,
            "held": held,
            "now": dialect.moment(db, now),
            "pausable": False,
        }
        if carrying is not None:
            params.update(carrying.params(db, dialect))
        atomic = atomic or (carrying is not None and faults.active())
        with dialect.transaction(db) if atomic else dialect.write(db) as cursor:
            yield db, dialect, cursor, params
            if carrying is not None and atomic:
                # Only where a crash can be injected (elsewhere the window does nothing), and
                # then inside the transaction. Model requests are reached as "model" at every
                # window, as the harness targets them.
                faults.reach("during_outcome", run, carrying.op.key, _operation_name(carrying.op))


def _published(
    run: Run, db: BaseDatabaseWrapper, carried: _Held | None, ids: list[int], own: list[Written]
) -> None:
    """After the commit of a record: its events published in log order, then the carried
    outcome's "after_outcome" window."""
    if publishing():
        written = ([carried.written] if carried is not None else []) + own
        for event_id, each in zip(ids, written, strict=True):
            published(db, event_id, each)
    if carried is not None:
        faults.reach("after_outcome", run, carried.op.key, _operation_name(carried.op))


# --- the two records of a call ------------------------------------------------------------------


def _refused(run: Run, carried: _Held | None, *, pausable: bool) -> NoReturn:
    """A fenced record wrote nothing: the run is no longer ours (LeaseLost), or an intent met
    an operator's pause (PauseRequested; the outcome it carried is held again, for the pause's
    own move to carry)."""
    ours = Run.objects.by_key(run.pk, fence=run.fence, status=RunStatus.RUNNING)
    if pausable and ours.exclude(pause_requested_by="").exists():
        if carried is not None:
            run.__dict__[_HELD] = carried
        raise PauseRequested(run.pk)
    raise LeaseLost(run.pk)


# What a new operation row holds unless its record says otherwise (NEW_OPERATION's values).
_NEW_OPERATION = {
    "result": None,
    "is_error": False,
    "error": "",
    "usage": None,
    "attempts": 1,
    "outcome_at": None,
}


def _insert_operation(
    run: Run,
    now: dt.datetime,
    *,
    event_kind: EventKind,
    data: dict[str, Any],
    pausable: bool = False,
    **fields: Any,
) -> Operation:
    """A new operation row and its event, fenced; the Operation as `objects.create` returns it."""
    carried = _take_held(run)
    with _record(run, now, atomic=False, carrying=carried) as (db, dialect, cursor, params):
        params.update(
            pausable=pausable,
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
        written = dialect.new_operation(db, cursor, params, carried=carried is not None)
        if written is None:
            _refused(run, carried, pausable=params["pausable"])
    event_ids, operation_id = written
    _published(run, db, carried, event_ids, [Written(run.pk, event_kind, fields["key"], data, now)])
    # Built as a query's row is (no defaults to resolve, no Model.__init__).
    values = {**_NEW_OPERATION, "id": operation_id, "run_id": run.pk, "intent_at": now, **fields}
    op = built(Operation, db.alias, values)
    Operation.run.field.set_cached_value(op, run)
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
    """Write 1 of 2: the operation's full input, committed before it is dispatched (with the
    held outcome of the call before it, if any). It is the engine's pause point: if an operator
    asked the run to pause, it writes nothing and raises PauseRequested.

    `rerun` says, in the intent's event, why an operation with an earlier intent runs again.
    """
    now = clock.now()
    if existing is None:
        return _insert_operation(
            run,
            now,
            event_kind=EventKind.INTENT,
            data={"call": kind, "name": name, "attempt": 1},
            pausable=True,
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
    carried = _take_held(run)
    with _record(run, now, atomic=False, carrying=carried) as (db, dialect, cursor, params):
        params.update(
            pausable=True,
            op=existing.pk,
            attempts=attempts,
            key=key,
            event=EventKind.INTENT,
            data=dialect.json(db, data),
        )
        ids = dialect.update_operation(db, cursor, "reintent", params, carried=carried is not None)
        if ids is None:
            _refused(run, carried, pausable=True)
    _published(run, db, carried, ids, [Written(run.pk, EventKind.INTENT, key, data, now)])
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
    hold: bool = False,
) -> None:
    """Write 2 of 2: the normalized result (or error), atomically with its event.

    `hold=True` when the next call is ready to dispatch: the outcome is held, written but not
    committed, and the run's next fenced record carries it, in the same commit (the fold). The
    caller then does nothing that depends on the outcome before that record. Otherwise it
    commits alone, now.
    """
    settle(run)  # an outcome never carries another: the one held before it commits first
    now = clock.now()
    data = {
        "call": op.kind,
        "name": op.name,
        "status": status,
        "is_error": is_error,
        "error": error,
    }
    written = Written(run.pk, EventKind.OUTCOME, op.key, data, now)
    held = _Held(op, status, result, is_error, error, usage, written)
    op.status, op.result, op.is_error, op.error, op.usage, op.outcome_at = (
        status,
        result,
        is_error,
        error,
        usage,
        now,
    )
    run.__dict__[_HELD] = held
    if not hold:
        settle(run)


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
    carried = _take_held(run)
    with _record(run, now, atomic=False, carrying=carried) as (db, dialect, cursor, params):
        params.update(status=status, key=key, event=kind, data=dialect.json(db, data))
        for name, value in fields.items():
            field = Run._meta.get_field(name)
            assert isinstance(field, Field)  # the run's own columns, never a relation
            assignments.append(f"{field.column} = %(f_{name})s")
            params[f"f_{name}"] = field.get_db_prep_save(value, db)
        moved = ", ".join(assignments)
        ids = dialect.move_owned(db, cursor, moved, params, carried=carried is not None)
        if ids is None:
            raise LeaseLost(run.pk)
    _published(run, db, carried, ids, [Written(run.pk, kind, key, data, now)])
    run.status = status


def request_interaction(
    run: Run, *, key: str, kind: str, tool_name: str, payload: dict[str, Any]
) -> Interaction:
    """Ask a person; the run waits. Written before the tool's intent."""
    transitions.check([RunStatus.RUNNING], RunStatus.WAITING)
    settle(run)  # the outcome before the question: a person never waits on an unwritten one
    now = clock.now()
    with _carried_fence(run) as (fence, held), transaction.atomic():
        # The move is the fence: it lands only while the run is ours.
        moved = Run.objects.by_key(run.pk, fence=fence, status=held).update(
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
    Run.objects.by_key(run_id, status=RunStatus.RUNNING).update(
        lease_expires_at=clock.now() - dt.timedelta(seconds=1)
    )

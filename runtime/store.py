"""Persistence in one place: claims, fenced writes, guarded transitions and the sweep queries.

Every transition is a guarded UPDATE whose row count says whether it landed. A worker's writes
are fenced: each one renews the run's lease with `WHERE fence = <ours> AND status = 'running'`
and writes nothing unless that UPDATE landed. On PostgreSQL the UPDATE also takes the run's row
lock, so a takeover (which bumps the fence under the same lock) is ordered strictly before or
after each write, never between the check and the write. On SQLite every transaction is
IMMEDIATE, so writers are serialized.

The hot path — the intent and the outcome of every call, and the run's last transition — is
raw SQL on the DB-API connection under Django's connection, because the ORM and Django's
transaction bookkeeping cost more than the commit itself (bench.overhead measures it; see
the README's Performance section):
- PostgreSQL: each record is ONE statement, a data-modifying CTE (the fence UPDATE, the
  operation row, its event), prepared once per connection. The intent commits alone; the
  outcome commits in a transaction of its own that holds the "during_outcome" crash window,
  so a crash there rolls the whole outcome back.
- SQLite: no data-modifying CTEs, but no round trips either: the same three writes are three
  statements in one BEGIN IMMEDIATE transaction, the fence UPDATE first.
Inside a caller's transaction (a verb's `atomic()`, a test) a write is a savepoint of it instead
(`transaction.atomic()`), so it still rolls back alone and its events publish on the outer
commit. Events are published after commit as Event instances built from the returned ids.

`fenced(run)` is the fence as a transaction, for the rare writes (interactions, the heartbeat).
Test harnesses may replace it to watch or to remove the fence check (tests/reliability does
both); while it is replaced, every fenced write runs inside the replacement without its own
fence predicate, so the replacement decides for all of them, as when every write went through
`fenced`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Q

from runtime import clock, dispatch, faults
from runtime.errors import LeaseLost
from runtime.models import (
    Event,
    Interaction,
    InteractionStatus,
    Operation,
    OperationKind,
    OperationStatus,
    Run,
    RunStatus,
)

RUNTIME = "runtime"


def lease_seconds() -> float:
    return float(settings.AGENTOPS_LEASE_SECONDS)


# --- the statements ---------------------------------------------------------------------------

_RUN = Run._meta.db_table
_OPERATION = Operation._meta.db_table
_EVENT = Event._meta.db_table
_EVENT_FIELDS = [f.attname for f in Event._meta.concrete_fields]

# The fence predicate of every fenced statement; left out while a harness replaced `fenced`.
_FENCE = "AND fence = %(fence)s AND status = 'running'"
_HOLD = (
    f"UPDATE {_RUN} SET lease_expires_at = %(lease)s, updated_at = %(now)s "
    "WHERE id = %(run)s {fence}"
)
_OPERATION_COLUMNS = (
    "run_id, key, kind, name, policy, status, input, input_hash, result, is_error, error, "
    "usage, attempts, intent_at, outcome_at"
)
_OPERATION_VALUES = (
    "%(key)s, %(kind)s, %(name)s, %(policy)s, %(status)s, %(input)s, %(input_hash)s, "
    "%(result)s, %(is_error)s, '', NULL, 1, %(now)s, %(outcome_at)s"
)
_EVENT_COLUMNS = "run_id, kind, actor, operation_key, data, created_at"
_REINTENT = (
    "status = 'started', attempts = %(attempts)s, intent_at = %(now)s, error = '', "
    "outcome_at = NULL"
)
_OUTCOME = (
    "status = %(status)s, result = %(result)s, is_error = %(is_error)s, error = %(error)s, "
    "usage = %(usage)s, outcome_at = %(now)s"
)


def _postgres_statements(fence: str) -> dict[str, str]:
    """PostgreSQL: a record is one statement. `held` is the fence UPDATE; everything after it
    selects FROM held, so nothing is written unless the fence held (no row comes back)."""
    held = f"held AS ({_HOLD.format(fence=fence)} RETURNING id)"
    event = (
        f"ev AS (INSERT INTO {_EVENT} ({_EVENT_COLUMNS}) "
        "SELECT id, %(event)s, 'runtime', %(key)s, %(data)s, %(now)s FROM held RETURNING id)"
    )
    update = (
        f"WITH {held}, op AS (UPDATE {_OPERATION} SET {{set}} "
        f"WHERE id = %(op)s AND EXISTS (SELECT 1 FROM held) RETURNING id), {event} "
        "SELECT ev.id FROM ev"
    )
    # Parameters in a SELECT list get no type from the INSERT's columns: cast the nullable ones.
    values = _OPERATION_VALUES.replace("%(result)s", "%(result)s::jsonb").replace(
        "%(outcome_at)s", "%(outcome_at)s::timestamptz"
    )
    return {
        "fence": fence,
        "new": (
            f"WITH {held}, op AS (INSERT INTO {_OPERATION} ({_OPERATION_COLUMNS}) "
            f"SELECT id, {values} FROM held RETURNING id), {event} "
            "SELECT ev.id, op.id FROM op, ev"
        ),
        "reintent": update.format(set=_REINTENT),
        "outcome": update.format(set=_OUTCOME),
        # The run's transition is itself the fence: it lands only while the run is ours.
        "transition": f"WITH held AS ({{move}} RETURNING id), {event} SELECT ev.id FROM ev",
    }


def _sqlite(statement: str) -> str:
    # sqlite3 takes named parameters as :name, not %(name)s.
    return re.sub(r"%\((\w+)\)s", r":\1", statement)


def _sqlite_statements(fence: str) -> dict[str, str]:
    """SQLite: the same records as statements of one IMMEDIATE transaction, fence first."""
    return {
        "fence": fence,
        "hold": _sqlite(_HOLD.format(fence=fence)),
        "new": _sqlite(
            f"INSERT INTO {_OPERATION} ({_OPERATION_COLUMNS}) VALUES (%(run)s, {_OPERATION_VALUES})"
        ),
        "reintent": _sqlite(f"UPDATE {_OPERATION} SET {_REINTENT} WHERE id = %(op)s"),
        "outcome": _sqlite(f"UPDATE {_OPERATION} SET {_OUTCOME} WHERE id = %(op)s"),
        "event": _sqlite(
            f"INSERT INTO {_EVENT} ({_EVENT_COLUMNS}) "
            "VALUES (%(run)s, %(event)s, 'runtime', %(key)s, %(data)s, %(now)s)"
        ),
    }


_STATEMENTS = {
    (vendor, checked): build(_FENCE if checked else "")
    for vendor, build in (("postgresql", _postgres_statements), ("sqlite", _sqlite_statements))
    for checked in (True, False)
}
_INSERT_EVENT = (
    f"INSERT INTO {_EVENT} ({_EVENT_COLUMNS}) "
    "VALUES (%(run)s, %(kind)s, %(actor)s, %(key)s, %(data)s, %(now)s)"
)


# --- the connection and values as it takes them -------------------------------------------------


@contextmanager
def _cursor(db: BaseDatabaseWrapper) -> Iterator[Any]:
    """A DB-API cursor on the connection under `db`. On PostgreSQL a server-binding one: Django's
    default cursor binds client-side, which cannot use prepared statements."""
    if db.vendor == "postgresql":
        import psycopg

        cursor = psycopg.Cursor(db.connection)
    else:
        cursor = db.connection.cursor()
    try:
        yield cursor
    finally:
        cursor.close()


def _db() -> BaseDatabaseWrapper:
    db = connections[DEFAULT_DB_ALIAS]
    db.close_if_health_check_failed()
    db.ensure_connection()
    return db


# A threshold no query reaches: psycopg then prepares only what asks for it (prepare=True).
_EXPLICIT_ONLY = 2**62


def _execute(db: BaseDatabaseWrapper, cursor: Any, statement: str, params: dict[str, Any]) -> Any:
    if db.vendor == "postgresql":
        # Our statements are prepared once per connection: planning a three-part CTE costs
        # about as much as its commit. Django turns psycopg's prepared statements off (None)
        # for the sake of connection poolers; we turn them on for explicit requests only, so
        # nothing else on the connection changes. AGENTOPS_PREPARED_STATEMENTS = False keeps
        # them off, for a pooler that cannot hold them (PgBouncer in transaction mode < 1.21).
        prepare = bool(getattr(settings, "AGENTOPS_PREPARED_STATEMENTS", True))
        raw = db.connection
        if prepare and raw.prepare_threshold is None:
            raw.prepare_threshold = _EXPLICIT_ONLY
        return cursor.execute(statement, params, prepare=prepare or None)
    return cursor.execute(_sqlite(statement) if "%(" in statement else statement, params)


def _run_id(db: BaseDatabaseWrapper, run_id: Any) -> Any:
    # A native uuid on PostgreSQL, 32 hex digits on SQLite: what the ORM would send.
    return Run._meta.pk.get_db_prep_value(run_id, db)


def _json(db: BaseDatabaseWrapper, value: Any) -> Any:
    # None is SQL NULL, as the ORM saves it (never the JSON null).
    return None if value is None else db.ops.adapt_json_value(value, None)


def _hold_params(db: BaseDatabaseWrapper, run: Run, now: dt.datetime) -> dict[str, Any]:
    ops = db.ops
    return {
        "run": _run_id(db, run.pk),
        "fence": run.fence,
        "lease": ops.adapt_datetimefield_value(now + dt.timedelta(seconds=lease_seconds())),
        "now": ops.adapt_datetimefield_value(now),
    }


@dataclass(frozen=True)
class _Event:
    """An event as written: the run's, by the runtime unless an actor is named."""

    run_id: Any
    kind: str
    key: str
    data: dict[str, Any]
    now: dt.datetime
    actor: str = RUNTIME


def _published(db: BaseDatabaseWrapper, event_id: int, written: _Event) -> Event:
    """The Event just inserted, as the ORM would have returned it (no query); published when
    the surrounding transaction commits (call it after the write's own commit)."""
    values = {
        "id": event_id,
        "run_id": written.run_id,
        "kind": written.kind,
        "actor": written.actor,
        "operation_key": written.key,
        "data": written.data,
        "created_at": written.now,
    }
    created = Event.from_db(db.alias, _EVENT_FIELDS, [values[f] for f in _EVENT_FIELDS])
    dispatch.publish_on_commit(created)
    return created


def _publish(db: BaseDatabaseWrapper, event_id: int, written: _Event) -> None:
    """Publish an event of the hot path; nothing to build when no one listens (as dispatch)."""
    if getattr(settings, "AGENTOPS_PUBLISH", ""):
        _published(db, event_id, written)


def _insert_event(db: BaseDatabaseWrapper, cursor: Any, written: _Event) -> int:
    params = {
        "run": None if written.run_id is None else _run_id(db, written.run_id),
        "kind": written.kind,
        "actor": written.actor,
        "key": written.key,
        "data": _json(db, written.data),
        "now": db.ops.adapt_datetimefield_value(written.now),
    }
    if db.vendor == "postgresql":
        return int(_execute(db, cursor, _INSERT_EVENT + " RETURNING id", params).fetchone()[0])
    return int(_execute(db, cursor, _INSERT_EVENT, params).lastrowid)


def event(run_id: Any, kind: str, actor: str = RUNTIME, key: str = "", **data: Any) -> Event:
    """Append one event; live updates go out after the surrounding transaction commits."""
    db = _db()
    written = _Event(run_id, kind, key, data, clock.now(), actor)
    with db.wrap_database_errors, _cursor(db) as cursor:
        event_id = _insert_event(db, cursor, written)
    return _published(db, event_id, written)


@contextmanager
def _transaction(db: BaseDatabaseWrapper) -> Iterator[Any]:
    """A transaction for raw statements; yields the DB-API cursor to run them on.

    Inside a caller's transaction it is a savepoint of it (Django's atomic()). Otherwise it is
    opened and closed on the DB-API connection directly: Django's atomic() bookkeeping costs
    more than SQLite's commit. Whatever commits here publishes its events only afterwards.
    """
    with db.wrap_database_errors:
        if db.in_atomic_block:
            with transaction.atomic(using=db.alias), _cursor(db) as cursor:
                yield cursor
        elif db.vendor == "postgresql":
            with _cursor(db) as cursor, db.connection.transaction():
                yield cursor
        else:
            raw = db.connection
            with _cursor(db) as cursor:
                # IMMEDIATE like Django's transactions here: the write lock at BEGIN.
                cursor.execute("BEGIN IMMEDIATE")
                try:
                    yield cursor
                    raw.commit()
                except BaseException:
                    raw.rollback()
                    raise


# --- claim ----------------------------------------------------------------------------------


def runnable(now: dt.datetime) -> Q:
    """Runs a worker may claim now: queued, a running one whose lease expired, a due timer."""
    return (
        Q(status=RunStatus.QUEUED)
        | Q(status=RunStatus.RUNNING, lease_expires_at__lt=now)
        | Q(status=RunStatus.RETRY_WAIT, next_attempt_at__lte=now)
    )


_SEEN = (
    f"SELECT status, fence, lease_owner FROM {_RUN} WHERE id = %(run)s AND ("
    "status = 'queued' OR (status = 'running' AND lease_expires_at < %(now)s) "
    "OR (status = 'retry_wait' AND next_attempt_at <= %(now)s))"
)
# Every claim counts as a crash until it ends cleanly (a transition out of `running` resets
# the count): a worker that dies, or a claim that ends in an unexpected exception, leaves it up.
# Taking over an expired lease records the lost worker as the last crash (the CASE reads the
# status before the UPDATE).
_CLAIM = (
    f"UPDATE {_RUN} SET status = 'running', lease_owner = %(owner)s, lease_expires_at = %(lease)s, "
    "fence = fence + 1, next_attempt_at = NULL, crashed_claims = crashed_claims + 1, "
    "last_crash = CASE WHEN status = 'running' THEN %(lost)s ELSE last_crash END, "
    "updated_at = %(now)s "
    "WHERE id = %(run)s AND status = %(status)s AND fence = %(fence)s"
)


def claim(run_id: Any, owner: str) -> Run | None:
    """Take the run for `owner` with a fresh lease and fence, or None if it is not claimable.

    Optimistic: read the run (the `runnable` condition), then UPDATE guarded on the status and
    fence read, so of two workers delivered the same run exactly one lands, and the winner
    knows what it took over.
    """
    now = clock.now()
    db = _db()
    ops = db.ops
    params = {
        "run": _run_id(db, run_id),
        "now": ops.adapt_datetimefield_value(now),
        "lease": ops.adapt_datetimefield_value(now + dt.timedelta(seconds=lease_seconds())),
        "owner": owner,
    }
    with db.wrap_database_errors, _cursor(db) as cursor:
        seen = _execute(db, cursor, _SEEN, params).fetchone()
    if seen is None:
        return None
    status, fence, previous_owner = seen
    lost = f"the worker {previous_owner} lost the run: its lease expired (it died or stalled)"
    params.update(status=status, fence=fence, lost=lost)
    written = [_Event(run_id, "claimed", "", {"owner": owner, "fence": fence + 1}, now)]
    if status == RunStatus.RUNNING:
        data = {"previous_owner": previous_owner, "owner": owner}
        written.insert(0, _Event(run_id, "lease_expired", "", data, now))
    with _transaction(db) as cursor:
        if _execute(db, cursor, _CLAIM, params).rowcount != 1:
            return None
        ids = [_insert_event(db, cursor, each) for each in written]
    for event_id, each in zip(ids, written, strict=True):
        _published(db, event_id, each)
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


_CHECKED_FENCED = fenced


def still_running(run_id: Any, fence: int) -> bool:
    """Whether the claim with `fence` still holds the run: False once it was cancelled or taken
    over (cancel bumps the fence too). One primary-key read, cheap enough to poll."""
    return Run.objects.filter(pk=run_id, fence=fence, status=RunStatus.RUNNING).exists()


def renew(run: Run) -> None:
    """The heartbeat: keep the lease alive during a long call. Raises LeaseLost if taken over."""
    with fenced(run):
        pass


@contextmanager
def _fenced_write(
    db: BaseDatabaseWrapper, run: Run, *, atomic: bool
) -> Iterator[tuple[Any, dict[str, str]]]:
    """The frame of one fenced write: yields a DB-API cursor and the statements to run on it.

    `atomic=False` lets a PostgreSQL write that is one statement commit alone (no BEGIN and
    COMMIT round trips). The write raises LeaseLost, having written nothing, if the fence fails.
    """
    checked = fenced is _CHECKED_FENCED
    statements = _STATEMENTS[(db.vendor, checked)]
    if not checked:
        with db.wrap_database_errors, fenced(run), _cursor(db) as cursor:
            yield cursor, statements
    elif atomic or db.vendor != "postgresql" or db.in_atomic_block:
        with _transaction(db) as cursor:
            yield cursor, statements
    else:
        with db.wrap_database_errors, _cursor(db) as cursor:
            yield cursor, statements


def _write(
    db: BaseDatabaseWrapper,
    run: Run,
    cursor: Any,
    statements: dict[str, str],
    *,
    name: str,
    params: dict[str, Any],
) -> tuple[int, int | None]:
    """One fenced record (fence, operation INSERT or UPDATE, event): (event id, operation id of
    an INSERT). Raises LeaseLost, having written nothing, if the run is no longer ours."""
    if db.vendor == "postgresql":
        row = _execute(db, cursor, statements[name], params).fetchone()
        if row is None:
            raise LeaseLost(run.pk)
        return row[0], (row[1] if len(row) > 1 else None)
    if _execute(db, cursor, statements["hold"], params).rowcount != 1:
        raise LeaseLost(run.pk)
    operation_id = _execute(db, cursor, statements[name], params).lastrowid
    return _execute(db, cursor, statements["event"], params).lastrowid, operation_id


def _insert_operation(
    run: Run,
    now: dt.datetime,
    *,
    event_kind: str,
    event_data: dict[str, Any],
    **fields: Any,
) -> Operation:
    """A new operation row and its event, fenced; the Operation as `objects.create` returns it."""
    db = _db()
    ops = db.ops
    params = {
        **_hold_params(db, run, now),
        "key": fields["key"],
        "kind": fields["kind"],
        "name": fields["name"],
        "policy": fields["policy"],
        "status": fields["status"],
        "input": _json(db, fields["input"]),
        "input_hash": fields["input_hash"],
        "result": _json(db, fields.get("result")),
        "is_error": fields.get("is_error", False),
        "outcome_at": ops.adapt_datetimefield_value(fields.get("outcome_at")),
        "event": event_kind,
        "data": _json(db, event_data),
    }
    with _fenced_write(db, run, atomic=False) as (cursor, statements):
        event_id, operation_id = _write(db, run, cursor, statements, name="new", params=params)
    _publish(db, event_id, _Event(run.pk, event_kind, fields["key"], event_data, now))
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
            event_kind="intent",
            event_data={"call": kind, "name": name, "attempt": 1},
            key=key,
            kind=kind,
            name=name,
            policy=policy,
            status=OperationStatus.STARTED,
            input=input,
            input_hash=input_hash,
        )
    db = _db()
    attempts = existing.attempts + 1
    data: dict[str, Any] = {"call": kind, "name": name, "attempt": attempts}
    if rerun:
        data["rerun"] = rerun
    params = {
        **_hold_params(db, run, now),
        "op": existing.pk,
        "attempts": attempts,
        "key": key,
        "event": "intent",
        "data": _json(db, data),
    }
    with _fenced_write(db, run, atomic=False) as (cursor, statements):
        event_id, _ = _write(db, run, cursor, statements, name="reintent", params=params)
    _publish(db, event_id, _Event(run.pk, "intent", key, data, now))
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
    db = _db()
    data = {
        "call": op.kind,
        "name": op.name,
        "status": status,
        "is_error": is_error,
        "error": error,
    }
    params = {
        **_hold_params(db, run, now),
        "op": op.pk,
        "status": status,
        "result": _json(db, result),
        "is_error": is_error,
        "error": error,
        "usage": _json(db, usage),
        "key": op.key,
        "event": "outcome",
        "data": _json(db, data),
    }
    # A transaction of its own even where the write is one statement: the crash window
    # "during_outcome" sits inside it, after the statement, and must roll it back whole.
    with _fenced_write(db, run, atomic=True) as (cursor, statements):
        event_id, _ = _write(db, run, cursor, statements, name="outcome", params=params)
        # Model requests are reached as "model" at every window, as the harness targets them.
        faults.reach("during_outcome", run, op.key, _operation_name(op))
    _publish(db, event_id, _Event(run.pk, "outcome", op.key, data, now))
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
        event_kind="outcome",
        event_data={"call": "tool", "name": name, "status": status, "is_error": is_error},
        key=key,
        kind="tool",
        name=name,
        policy=policy,
        status=status,
        input=input,
        input_hash=input_hash,
        result=result,
        is_error=is_error,
        outcome_at=now,
    )


def transition(
    run: Run,
    status: str,
    kind: str,
    *,
    key: str = "",
    data: dict[str, Any] | None = None,
    **fields: Any,
) -> None:
    """Move the owned run out of `running` (done, failed, waiting, …), releasing the lease.

    The claim ended cleanly: its crash count is reset, and the last model error's kind is
    cleared, unless `fields` set them.
    """
    now = clock.now()
    db = _db()
    data = data or {}
    fields = {"crashed_claims": 0, "error_kind": "", **fields}
    params: dict[str, Any] = {
        "run": _run_id(db, run.pk),
        "fence": run.fence,
        "now": db.ops.adapt_datetimefield_value(now),
        "status": status,
        "key": key,
        "event": kind,
        "data": _json(db, data),
    }
    assignments = [
        "status = %(status)s",
        "lease_owner = ''",
        "lease_expires_at = NULL",
        "updated_at = %(now)s",
    ]
    for name, value in fields.items():
        field = Run._meta.get_field(name)
        assignments.append(f"{field.column} = %(f_{name})s")
        params[f"f_{name}"] = field.get_db_prep_save(value, db)
    with _fenced_write(db, run, atomic=False) as (cursor, statements):
        move = (
            f"UPDATE {_RUN} SET {', '.join(assignments)} WHERE id = %(run)s {statements['fence']}"
        )
        if db.vendor == "postgresql":
            statement = statements["transition"].format(move=move)
            row = _execute(db, cursor, statement, params).fetchone()
            if row is None:
                raise LeaseLost(run.pk)
            event_id = row[0]
        else:
            if _execute(db, cursor, move, params).rowcount != 1:
                raise LeaseLost(run.pk)
            event_id = _execute(db, cursor, statements["event"], params).lastrowid
    _publish(db, event_id, _Event(run.pk, kind, key, data, now))
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
            status=RunStatus.WAITING,
            lease_owner="",
            lease_expires_at=None,
            crashed_claims=0,
            error_kind="",
            updated_at=now,
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


def intents_since_a_person_acted(run: Run, key: str) -> int:
    """Intents written for `key` since a person last acted on the run (submitted, retried,
    resolved, …): the attempts an operation has made on its own, for its crash budget."""
    last = Event.objects.filter(run=run).exclude(actor=RUNTIME).order_by("-id").values("id").first()
    return Event.objects.filter(
        run=run, operation_key=key, kind="intent", id__gt=last["id"] if last else 0
    ).count()


def last_word_is_outcome(run: Run, key: str) -> bool:
    """Whether the outcome of `key` is the last thing written for the run, claims aside: the
    outcome committed and the run's move after it did not (its worker died in between)."""
    last = (
        Event.objects.filter(run=run)
        .exclude(kind__in=("claimed", "lease_expired"))
        .order_by("-id")
        .values("kind", "operation_key")
        .first()
    )
    return last is not None and last["kind"] == "outcome" and last["operation_key"] == key


def pending_interactions(run: Run) -> Any:
    return Interaction.objects.filter(run=run, status=InteractionStatus.PENDING)

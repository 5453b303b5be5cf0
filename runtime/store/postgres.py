"""PostgreSQL: a record is ONE statement, a data-modifying CTE, prepared once per connection.

`held` is the fence, the run's row read and locked; every other part selects FROM it, so
nothing is written unless the fence held (then no row comes back). The row lock orders a
takeover or a cancel (each bumps the fence under the same lock) strictly before or after each
write, never between the check and the write.

A record that carries a held outcome (the fold: worker.py) adds that outcome's UPDATE and
inserts both events with one INSERT, in log order (the outcome's first): still one statement,
so the outcome and the next intent commit together in one round trip. A record commits alone
(autocommit, no BEGIN and COMMIT round trips) unless a crash can be injected (runtime.faults):
then it runs in a transaction that holds the "during_outcome" window, so a crash there rolls
the whole record back.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, ClassVar

import psycopg
from django.conf import settings
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import ForeignKey, Model
from psycopg.types.json import Jsonb

from runtime import jsonvalues
from runtime.models import Run, Session
from runtime.store.dialect import Claimed, Dialect, OperationUpdate, Started
from runtime.store.sql import (
    AGENT_VERSION,
    CLAIMED_RUN_COLUMNS,
    EVENT,
    EVENT_COLUMNS,
    FENCE,
    INSERT_EVENT,
    OPERATION,
    OPERATION_COLUMNS,
    OWNED,
    RUN,
    RUN_COLUMNS,
    RUNNABLE_BY_KEY,
    SESSION,
    SESSION_COLUMNS,
)

HELD = f"held AS ({FENCE} FOR NO KEY UPDATE)"
EVENT_FROM_HELD = f"""ev AS (
    INSERT INTO {EVENT} ({EVENT_COLUMNS})
    SELECT id, %(event)s, 'runtime', %(key)s, %(data)s, %(now)s FROM held
    RETURNING id)"""

# The held outcome a record carries (its parameters are prefixed `p_`), and the two events in
# log order: the sequence is drawn after the ORDER BY, so the outcome's event id is the lower.
CARRIED = f"""carried AS (
    UPDATE {OPERATION}
    SET status = %(p_status)s, result = %(p_result)s, is_error = %(p_is_error)s,
        error = %(p_error)s, usage = %(p_usage)s, outcome_at = %(p_now)s
    WHERE id = %(p_op)s AND EXISTS (SELECT 1 FROM held))"""
EVENTS_FROM_HELD = f"""ev AS (
    INSERT INTO {EVENT} ({EVENT_COLUMNS})
    SELECT held.id, e.kind, 'runtime', e.key, e.data, e.at
    FROM held, (VALUES
        (1, %(p_event)s, %(p_key)s, %(p_data)s::jsonb, %(p_now)s::timestamptz),
        (2, %(event)s, %(key)s, %(data)s::jsonb, %(now)s::timestamptz)
    ) AS e (n, kind, key, data, at)
    ORDER BY e.n
    RETURNING id)"""

# Parameters in a SELECT list get no type from the INSERT's columns: the nullable ones are cast.
NEW = f"""op AS (
    INSERT INTO {OPERATION} ({OPERATION_COLUMNS})
    SELECT id, %(key)s, %(kind)s, %(name)s, %(policy)s, %(status)s, %(input)s, %(input_hash)s,
        %(result)s::jsonb, %(is_error)s, '', NULL, 1, %(now)s, %(outcome_at)s::timestamptz
    FROM held
    RETURNING id)"""

UPDATES: dict[OperationUpdate, str] = {
    "reintent": f"""op AS (
    UPDATE {OPERATION}
    SET status = 'started', attempts = %(attempts)s, intent_at = %(now)s, error = '',
        outcome_at = NULL
    WHERE id = %(op)s AND EXISTS (SELECT 1 FROM held))""",
    "outcome": f"""op AS (
    UPDATE {OPERATION}
    SET status = %(status)s, result = %(result)s, is_error = %(is_error)s, error = %(error)s,
        usage = %(usage)s, outcome_at = %(now)s
    WHERE id = %(op)s AND EXISTS (SELECT 1 FROM held))""",
}

# The event ids in log order; no row when the fence did not hold.
EVENT_IDS = "SELECT array_agg(id ORDER BY id) FROM ev HAVING count(*) > 0"
NEW_IDS = "SELECT (SELECT array_agg(id ORDER BY id) FROM ev), op.id FROM op"


def statement(held: str, write: str | None, tail: str, *, carried: bool) -> str:
    """One record as one statement: the fence, the carried outcome, the write, the events."""
    parts = [held, *([CARRIED] if carried else []), *([write] if write else [])]
    parts.append(EVENTS_FROM_HELD if carried else EVENT_FROM_HELD)
    return f"WITH {', '.join(parts)}\n{tail}"


NEW_OPERATION = {c: statement(HELD, NEW, NEW_IDS, carried=c) for c in (False, True)}
UPDATE_OPERATION = {
    (which, c): statement(HELD, part, EVENT_IDS, carried=c)
    for which, part in UPDATES.items()
    for c in (False, True)
}


def move_owned(assignments: str, *, carried: bool) -> str:
    """The run's move out of `running`, itself the fence: it lands only while the run is ours."""
    held = f"held AS (UPDATE {RUN} SET {assignments} WHERE {OWNED} RETURNING id)"
    return statement(held, None, EVENT_IDS, carried=carried)


# The claim as one statement: `seen` reads the runnable run and locks it, `claimed` takes it
# (guarded on what was seen, as the two-step claim on SQLite), and its events follow in log
# order: the lost lease's (a takeover), then the claim's. The claim is dated `at`: the worker's
# clock, unless the run moved after the worker read it (it waited for its connection, or its
# host stopped it), then that move's time, so that the run's history stays in order and the
# lease runs from the claim. It returns what was taken over, the event ids and the claimed
# run as the turn reads it (its subqueries see the tables as the statement began, which the
# claim does not write), or no row. The events' data is worker.claim's (`_claim_events`), built
# here in SQL because the fence and the lost owner are known only to the statement.
_RETURNED = ", ".join(f'run."{field.column}"' for field in Run._meta.concrete_fields)
CLAIM = f"""
WITH seen AS (
    SELECT id, status, fence, lease_owner,
        GREATEST(%(now)s::timestamptz, updated_at) AS at FROM {RUN}
    WHERE {RUNNABLE_BY_KEY} FOR NO KEY UPDATE),
claimed AS (
    UPDATE {RUN} AS run
    SET status = 'running', lease_owner = %(owner)s,
        lease_expires_at = seen.at + (%(lease)s::timestamptz - %(now)s::timestamptz),
        fence = run.fence + 1, next_attempt_at = NULL, crashed_claims = run.crashed_claims + 1,
        last_crash = CASE WHEN seen.status = 'running'
            THEN format(%(lost)s, seen.lease_owner) ELSE run.last_crash END,
        updated_at = seen.at
    FROM seen
    WHERE run.id = seen.id AND run.status = seen.status AND run.fence = seen.fence
    RETURNING {_RETURNED}, seen.status AS seen_status, seen.fence AS seen_fence,
        seen.lease_owner AS seen_owner),
ev AS (
    INSERT INTO {EVENT} ({EVENT_COLUMNS})
    SELECT id, kind, 'runtime', '', data, updated_at FROM (
        SELECT 1 AS n, id, updated_at, %(expired)s AS kind,
            jsonb_build_object('previous_owner', seen_owner, 'owner', %(owner)s::text) AS data
        FROM claimed WHERE seen_status = 'running'
        UNION ALL
        SELECT 2, id, updated_at, %(claimed)s,
            jsonb_build_object('owner', %(owner)s::text, 'fence', seen_fence + 1)
        FROM claimed
    ) AS e ORDER BY n
    RETURNING id)
SELECT seen_status, seen_fence, seen_owner, (SELECT array_agg(id ORDER BY id) FROM ev),
    {CLAIMED_RUN_COLUMNS}
FROM claimed AS run"""


# The type of each kind of column, for the parameters of an INSERT ... SELECT (a SELECT list
# gives them none from the INSERT's columns). Text columns take text, so that an over-long
# value is refused by the column, as the ORM's INSERT has it, where a cast to it would cut it.
TYPES = {
    "UUIDField": "uuid",
    "CharField": "text",
    "TextField": "text",
    "JSONField": "jsonb",
    "DateTimeField": "timestamptz",
    "PositiveIntegerField": "integer",
    "PositiveBigIntegerField": "bigint",
}


def typed(model: type[Model], prefix: str, **columns: str) -> str:
    """A SELECT list of every column of `model`, each its parameter (`prefix` + the column)
    cast to its type, unless `columns` says what it is instead."""
    parts = []
    for field in model._meta.concrete_fields:
        if field.column in columns:
            parts.append(columns[field.column])
            continue
        kind = (field.target_field if isinstance(field, ForeignKey) else field).get_internal_type()
        parts.append(f"%({prefix}{field.column})s::{TYPES[kind]}")
    return ", ".join(parts)


# A new session with its first run and the run's SUBMITTED event, as one statement. `chosen`
# is the newest registered version of the agent whose fingerprint is the code's (`code`: each
# version in the code and its fingerprint), locked as runtime.registry.unregister locks it, so
# a concurrent unregister is ordered before or after the whole submit; a version unregistered
# while this waited for its lock is passed over for the next one. The rest selects FROM it:
# nothing is written when no version matches (then no row comes back).
START_SESSION = f"""
WITH chosen AS (
    SELECT agent, version, fingerprint FROM {AGENT_VERSION}
    WHERE agent = %(agent)s AND unregistered_at IS NULL
        AND fingerprint = %(code)s::jsonb ->> version
    ORDER BY registered_at DESC, id DESC LIMIT 1
    FOR UPDATE),
chat AS (
    INSERT INTO {SESSION} ({SESSION_COLUMNS})
    SELECT {typed(Session, "s_")} FROM chosen),
started AS (
    INSERT INTO {RUN} ({RUN_COLUMNS})
    SELECT {typed(Run, "r_", version="chosen.version", fingerprint="chosen.fingerprint")}
    FROM chosen
    RETURNING {RUN_COLUMNS}),
ev AS (
    INSERT INTO {EVENT} ({EVENT_COLUMNS})
    SELECT started.id, %(event)s, %(actor)s, '',
        jsonb_build_object('agent', chosen.agent, 'version', chosen.version), %(now)s
    FROM started, chosen
    RETURNING id AS event)
SELECT {RUN_COLUMNS}, event FROM started, ev"""


# A threshold no query reaches: psycopg then prepares only what asks for it (prepare=True).
_EXPLICIT_ONLY = 2**62

# The store's cursor of each connection, kept as long as the connection. A cursor caches the
# dumper of each parameter type it has sent; a new cursor per record looked every dumper up
# again, a seventh of a call's Python. Every statement's rows are fetched before the next
# statement runs, so the store's nested writes can share it.
_CURSORS: weakref.WeakKeyDictionary[Any, psycopg.Cursor[Any]] = weakref.WeakKeyDictionary()


class Postgres(Dialect):
    vendor: ClassVar[str] = "postgresql"
    one_statement: ClassVar[bool] = True
    ids_commit_in_order: ClassVar[bool] = False

    def cursor(self, db: BaseDatabaseWrapper) -> AbstractContextManager[Any]:
        # A server-binding cursor: Django's binds client-side, which cannot prepare statements.
        raw = db.connection
        cursor = _CURSORS.get(raw)
        if cursor is None or cursor.closed:
            cursor = _CURSORS[raw] = psycopg.Cursor(raw)
        return nullcontext(cursor)

    def execute(
        self, db: BaseDatabaseWrapper, cursor: Any, sql: str, params: dict[str, Any]
    ) -> Any:
        # Our statements are prepared once per connection: planning a three-part CTE costs about
        # as much as its commit. Django turns psycopg's prepared statements off (None) for the
        # sake of connection poolers; we turn them on for explicit requests only, so nothing
        # else on the connection changes. AGENTOPS_PREPARED_STATEMENTS = False keeps them off,
        # for a pooler that cannot hold them (PgBouncer in transaction mode < 1.21).
        prepare = bool(getattr(settings, "AGENTOPS_PREPARED_STATEMENTS", True))
        raw = db.connection
        if prepare and raw.prepare_threshold is None:
            raw.prepare_threshold = _EXPLICIT_ONLY
        return cursor.execute(sql, params, prepare=prepare or None)

    def json(self, db: BaseDatabaseWrapper, value: Any) -> Any:
        # As Django's adapter wraps it (db.ops.adapt_json_value), with the encoder built once.
        return None if value is None else Jsonb(value, dumps=jsonvalues.dumps)

    @contextmanager
    def begin(self, db: BaseDatabaseWrapper) -> Iterator[Any]:
        with self.cursor(db) as cursor, db.connection.transaction():
            yield cursor

    def new_operation(
        self, db: BaseDatabaseWrapper, cursor: Any, params: dict[str, Any], *, carried: bool
    ) -> tuple[list[int], int] | None:
        row = self.execute(db, cursor, NEW_OPERATION[carried], params).fetchone()
        return None if row is None else (list(row[0]), int(row[1]))

    def update_operation(
        self,
        db: BaseDatabaseWrapper,
        cursor: Any,
        which: OperationUpdate,
        params: dict[str, Any],
        *,
        carried: bool,
    ) -> list[int] | None:
        row = self.execute(db, cursor, UPDATE_OPERATION[which, carried], params).fetchone()
        return None if row is None else list(row[0])

    def move_owned(
        self,
        db: BaseDatabaseWrapper,
        cursor: Any,
        assignments: str,
        params: dict[str, Any],
        *,
        carried: bool,
    ) -> list[int] | None:
        sql = move_owned(assignments, carried=carried)
        row = self.execute(db, cursor, sql, params).fetchone()
        return None if row is None else list(row[0])

    def claim(self, db: BaseDatabaseWrapper, params: dict[str, Any]) -> Claimed | None:
        with db.wrap_database_errors, self.cursor(db) as cursor:
            row = self.execute(db, cursor, CLAIM, params).fetchone()
        return None if row is None else (row[0], row[1], row[2], list(row[3]), row[4:])

    def insert_event(self, db: BaseDatabaseWrapper, cursor: Any, params: dict[str, Any]) -> int:
        return int(self.execute(db, cursor, INSERT_EVENT + " RETURNING id", params).fetchone()[0])

    def start_session(
        self, db: BaseDatabaseWrapper, cursor: Any, params: dict[str, Any], code: dict[str, str]
    ) -> Started | None:
        params = {**params, "code": self.json(db, code)}
        row = self.execute(db, cursor, START_SESSION, params).fetchone()
        return None if row is None else (list(row[:-1]), int(row[-1]))

    def record_statements(self) -> dict[str, str]:
        return {
            "new": NEW_OPERATION[False],
            "reintent": UPDATE_OPERATION["reintent", False],
            "outcome": UPDATE_OPERATION["outcome", False],
            "new+carried": NEW_OPERATION[True],
        }


DIALECT = Postgres()

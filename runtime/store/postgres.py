"""PostgreSQL: a record is ONE statement, a data-modifying CTE, prepared once per connection.

`held` is the fence UPDATE; every other part selects FROM it, so nothing is written unless the
fence held (then no row comes back). The UPDATE also takes the run's row lock, so a takeover
(which bumps the fence under the same lock) is ordered strictly before or after each write,
never between the check and the write. An intent commits alone (autocommit, no BEGIN and COMMIT
round trips); an outcome commits in a transaction of its own that holds the "during_outcome"
crash window, so a crash there rolls the whole outcome back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import psycopg
from django.conf import settings
from django.db.backends.base.base import BaseDatabaseWrapper

from runtime.store.dialect import Dialect, OperationUpdate
from runtime.store.sql import (
    EVENT,
    EVENT_COLUMNS,
    HOLD,
    INSERT_EVENT,
    OPERATION,
    OPERATION_COLUMNS,
    OWNED,
    RUN,
)

HELD = f"held AS ({HOLD} RETURNING id)"
EVENT_FROM_HELD = f"""ev AS (
    INSERT INTO {EVENT} ({EVENT_COLUMNS})
    SELECT id, %(event)s, 'runtime', %(key)s, %(data)s, %(now)s FROM held
    RETURNING id)"""

# Parameters in a SELECT list get no type from the INSERT's columns: the nullable ones are cast.
NEW_OPERATION = f"""
WITH {HELD},
op AS (
    INSERT INTO {OPERATION} ({OPERATION_COLUMNS})
    SELECT id, %(key)s, %(kind)s, %(name)s, %(policy)s, %(status)s, %(input)s, %(input_hash)s,
        %(result)s::jsonb, %(is_error)s, '', NULL, 1, %(now)s, %(outcome_at)s::timestamptz
    FROM held
    RETURNING id),
{EVENT_FROM_HELD}
SELECT ev.id, op.id FROM op, ev"""

REINTENT = f"""
WITH {HELD},
op AS (
    UPDATE {OPERATION}
    SET status = 'started', attempts = %(attempts)s, intent_at = %(now)s, error = '',
        outcome_at = NULL
    WHERE id = %(op)s AND EXISTS (SELECT 1 FROM held)),
{EVENT_FROM_HELD}
SELECT ev.id FROM ev"""

OUTCOME = f"""
WITH {HELD},
op AS (
    UPDATE {OPERATION}
    SET status = %(status)s, result = %(result)s, is_error = %(is_error)s, error = %(error)s,
        usage = %(usage)s, outcome_at = %(now)s
    WHERE id = %(op)s AND EXISTS (SELECT 1 FROM held)),
{EVENT_FROM_HELD}
SELECT ev.id FROM ev"""


def move_owned(assignments: str) -> str:
    """The run's move out of `running`, itself the fence: it lands only while the run is ours."""
    return f"""
WITH held AS (UPDATE {RUN} SET {assignments} WHERE {OWNED} RETURNING id),
{EVENT_FROM_HELD}
SELECT ev.id FROM ev"""


# A threshold no query reaches: psycopg then prepares only what asks for it (prepare=True).
_EXPLICIT_ONLY = 2**62


class Postgres(Dialect):
    vendor: ClassVar[str] = "postgresql"
    one_statement: ClassVar[bool] = True

    @contextmanager
    def cursor(self, db: BaseDatabaseWrapper) -> Iterator[Any]:
        # A server-binding cursor: Django's binds client-side, which cannot prepare statements.
        cursor = psycopg.Cursor(db.connection)
        try:
            yield cursor
        finally:
            cursor.close()

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

    @contextmanager
    def begin(self, db: BaseDatabaseWrapper) -> Iterator[Any]:
        with self.cursor(db) as cursor, db.connection.transaction():
            yield cursor

    def new_operation(
        self, db: BaseDatabaseWrapper, cursor: Any, params: dict[str, Any]
    ) -> tuple[int, int] | None:
        row = self.execute(db, cursor, NEW_OPERATION, params).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def update_operation(
        self, db: BaseDatabaseWrapper, cursor: Any, which: OperationUpdate, params: dict[str, Any]
    ) -> int | None:
        sql = REINTENT if which == "reintent" else OUTCOME
        row = self.execute(db, cursor, sql, params).fetchone()
        return None if row is None else int(row[0])

    def move_owned(
        self, db: BaseDatabaseWrapper, cursor: Any, assignments: str, params: dict[str, Any]
    ) -> int | None:
        row = self.execute(db, cursor, move_owned(assignments), params).fetchone()
        return None if row is None else int(row[0])

    def insert_event(self, db: BaseDatabaseWrapper, cursor: Any, params: dict[str, Any]) -> int:
        return int(self.execute(db, cursor, INSERT_EVENT + " RETURNING id", params).fetchone()[0])

    def record_statements(self) -> dict[str, str]:
        return {"new": NEW_OPERATION, "reintent": REINTENT, "outcome": OUTCOME}


DIALECT = Postgres()

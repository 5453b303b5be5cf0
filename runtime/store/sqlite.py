"""SQLite: no data-modifying CTEs, but no round trips either (the database is in the process):
a record is three statements in one BEGIN IMMEDIATE transaction, the fence's read first (four
when it carries an outcome: that outcome's UPDATE, and one INSERT for both events). Every
transaction takes the write lock at BEGIN (IMMEDIATE, as Django's are configured in settings), so
writers are serialized and the fence read cannot go stale before the write.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from django.db.backends.base.base import BaseDatabaseWrapper

from runtime.models import RUNTIME, Run, RunStatus, Session
from runtime.store.dialect import Claimed, Dialect, OperationUpdate, Started
from runtime.store.sql import (
    AGENT_VERSION,
    CLAIMED_RUN_COLUMNS,
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
    STATUS_ON_ROW,
    values,
)
from runtime.store.sql import EVENT as EVENT_TABLE


@functools.cache
def named(sql: str) -> str:
    """sqlite3 takes named parameters as :name, not %(name)s: converted once per statement."""
    return re.sub(r"%\((\w+)\)s", r":\1", sql)


NEW_OPERATION = named(f"""
INSERT INTO {OPERATION} ({OPERATION_COLUMNS})
VALUES (%(run)s, %(key)s, %(kind)s, %(name)s, %(policy)s, %(status)s, %(input)s, %(input_hash)s,
    %(result)s, %(is_error)s, '', NULL, 1, %(now)s, %(outcome_at)s)""")

REINTENT = named(f"""
UPDATE {OPERATION}
SET status = 'started', attempts = %(attempts)s, intent_at = %(now)s, error = '', outcome_at = NULL
WHERE id = %(op)s""")

OUTCOME = named(f"""
UPDATE {OPERATION}
SET status = %(status)s, result = %(result)s, is_error = %(is_error)s, error = %(error)s,
    usage = %(usage)s, outcome_at = %(now)s
WHERE id = %(op)s""")

FENCED = named(FENCE)
RUNTIME_EVENT = named(INSERT_EVENT.replace("%(actor)s", "'runtime'"))


def _carried(sql: str) -> str:
    """A statement of the carried outcome: the same, on its parameters (prefixed `p_`)."""
    return re.sub(r":(\w+)", lambda m: ":" + ("p_" + m[1] if m[1] != "run" else m[1]), sql)


CARRIED_OUTCOME = _carried(OUTCOME)
EVENT = named(INSERT_EVENT)
# A record that carries an outcome writes two events, the outcome's first: one statement, whose
# rows SQLite numbers one after the other in the order of its VALUES (the transaction holds the
# write lock), so the last row's id says both.
TWO_EVENTS = named(f"""
INSERT INTO {EVENT_TABLE} ({EVENT_COLUMNS}) VALUES
    (%(run)s, %(p_event)s, 'runtime', %(p_key)s, %(p_data)s, %(p_now)s),
    (%(run)s, %(event)s, 'runtime', %(key)s, %(data)s, %(now)s)""")


# The claim in two steps (no data-modifying CTE reads the run, takes it and writes its events
# at once here). What a claim reads: the run's state, if it is runnable now, and when the run
# last moved, if that is after the worker read its clock (as PostgreSQL's CLAIM has it: the
# claim is dated from it then). The times are text in one format, which orders them.
SEEN = named(f"""SELECT status, fence, lease_owner, MAX(%(now)s, updated_at) FROM {RUN}
WHERE {RUNNABLE_BY_KEY}""")

# The claim, guarded on the status and fence it read: of two claims of what they both read,
# exactly one lands. Every claim counts as a crash until it ends cleanly (a transition out of
# `running` resets the count): a worker that dies, or a claim that ends in an unexpected
# exception, leaves it up. Taking over an expired lease records the lost worker as the last
# crash (the CASE reads the status before the UPDATE).
CLAIM = named(f"""
UPDATE {RUN}
SET status = 'running', lease_owner = %(owner)s, lease_expires_at = %(lease)s,
    fence = fence + 1, next_attempt_at = NULL, crashed_claims = crashed_claims + 1,
    last_crash = CASE WHEN status = 'running' THEN %(lost)s ELSE last_crash END,
    updated_at = %(now)s
WHERE id = %(run)s AND {STATUS_ON_ROW} = %(status)s AND fence = %(fence)s""")

# The claimed run, as the turn reads it: in the claim's transaction.
CLAIMED_RUN = named(f"SELECT {CLAIMED_RUN_COLUMNS} FROM {RUN} AS run WHERE id = %(run)s")

# A new session with its first run (its event is EVENT): after REGISTERED_VERSIONS, in one
# transaction.
INSERT_SESSION = named(
    f"INSERT INTO {SESSION} ({SESSION_COLUMNS}) VALUES ({values(Session, 's_')})"
)
INSERT_RUN = named(f"INSERT INTO {RUN} ({RUN_COLUMNS}) VALUES ({values(Run, 'r_')})")
_RUN_PARAMS = [f"r_{field.column}" for field in Run._meta.concrete_fields]
# The registered versions of the agent, newest first: the first whose fingerprint is the code's
# is taken (runtime.registry.registered_version's rule; PostgreSQL's START_SESSION has it too).
REGISTERED_VERSIONS = named(f"""SELECT version, fingerprint FROM {AGENT_VERSION}
WHERE agent = %(agent)s AND unregistered_at IS NULL ORDER BY registered_at DESC, id DESC""")


def move_owned(assignments: str) -> str:
    """The run's move out of `running`, itself the fence: it lands only while the run is ours."""
    return named(f"UPDATE {RUN} SET {assignments} WHERE {OWNED}")


class Sqlite(Dialect):
    vendor: ClassVar[str] = "sqlite"
    one_statement: ClassVar[bool] = False
    ids_commit_in_order: ClassVar[bool] = True

    @contextmanager
    def cursor(self, db: BaseDatabaseWrapper) -> Iterator[Any]:
        cursor = db.connection.cursor()
        try:
            yield cursor
        finally:
            cursor.close()

    def execute(
        self, db: BaseDatabaseWrapper, cursor: Any, sql: str, params: dict[str, Any]
    ) -> Any:
        return cursor.execute(sql if "%(" not in sql else named(sql), params)

    @contextmanager
    def begin(self, db: BaseDatabaseWrapper) -> Iterator[Any]:
        raw = db.connection
        cursor = raw.cursor()
        try:
            cursor.execute("BEGIN IMMEDIATE")
            try:
                yield cursor
                raw.commit()
            except BaseException:
                raw.rollback()
                raise
        finally:
            cursor.close()

    def moment(self, db: BaseDatabaseWrapper, value: dt.datetime | None) -> Any:
        # The clock's times (aware, UTC) as Django's adapter writes them, naive UTC text,
        # without its checks: a call's records write four or five.
        if value is not None and value.tzinfo is dt.UTC and db.timezone is dt.UTC:
            return value.isoformat(" ")[:-6]  # less its "+00:00"
        return super().moment(db, value)

    def _fenced(self, cursor: Any, params: dict[str, Any], carried: bool) -> bool:
        """The fence, then the carried outcome's write: whether the fence held. The transaction
        holds the database's write lock, so the fence read cannot change before the commit."""
        if cursor.execute(FENCED, params).fetchone() is None:
            return False
        self._carry(cursor, params, carried)
        return True

    def _carry(self, cursor: Any, params: dict[str, Any], carried: bool) -> None:
        if carried:
            cursor.execute(CARRIED_OUTCOME, params)

    def _events(self, cursor: Any, params: dict[str, Any], carried: bool) -> list[int]:
        """The record's events (the carried outcome's first): their ids in log order."""
        if not carried:
            return [int(cursor.execute(RUNTIME_EVENT, params).lastrowid)]
        last = int(cursor.execute(TWO_EVENTS, params).lastrowid)
        return [last - 1, last]

    def new_operation(
        self, db: BaseDatabaseWrapper, cursor: Any, params: dict[str, Any], *, carried: bool
    ) -> tuple[list[int], int] | None:
        if not self._fenced(cursor, params, carried):
            return None
        operation_id = cursor.execute(NEW_OPERATION, params).lastrowid
        return self._events(cursor, params, carried), int(operation_id)

    def update_operation(
        self,
        db: BaseDatabaseWrapper,
        cursor: Any,
        which: OperationUpdate,
        params: dict[str, Any],
        *,
        carried: bool,
    ) -> list[int] | None:
        if not self._fenced(cursor, params, carried):
            return None
        cursor.execute(REINTENT if which == "reintent" else OUTCOME, params)
        return self._events(cursor, params, carried)

    def move_owned(
        self,
        db: BaseDatabaseWrapper,
        cursor: Any,
        assignments: str,
        params: dict[str, Any],
        *,
        carried: bool,
    ) -> list[int] | None:
        if cursor.execute(move_owned(assignments), params).rowcount != 1:
            return None
        self._carry(cursor, params, carried)
        return self._events(cursor, params, carried)

    def claim(self, db: BaseDatabaseWrapper, params: dict[str, Any]) -> Claimed | None:
        with db.wrap_database_errors, self.cursor(db) as cursor:
            seen = cursor.execute(SEEN, params).fetchone()
        if seen is None:
            return None
        status, fence, previous_owner, at = seen
        guarded = {**params, "status": status, "fence": fence}
        if at != params["now"]:  # the run moved after the worker read its clock
            later = dt.datetime.fromisoformat(at) - dt.datetime.fromisoformat(params["now"])
            lease = dt.datetime.fromisoformat(params["lease"]) + later
            guarded.update(now=at, lease=str(lease))
        guarded["lost"] = params["lost"] % previous_owner
        # The events as worker._claim_events has them, in log order: a takeover's lost lease
        # first, then the claim.
        owner = params["owner"]
        events = [(params["claimed"], {"owner": owner, "fence": fence + 1})]
        if status == RunStatus.RUNNING:
            data = {"previous_owner": previous_owner, "owner": owner}
            events.insert(0, (params["expired"], data))
        event = {"run": params["run"], "actor": RUNTIME, "key": "", "now": guarded["now"]}
        with self.transaction(db) as cursor:
            if cursor.execute(CLAIM, guarded).rowcount != 1:
                return None
            ids = [
                self.insert_event(db, cursor, {**event, "event": kind, "data": self.json(db, data)})
                for kind, data in events
            ]
            claimed = cursor.execute(CLAIMED_RUN, {"run": params["run"]}).fetchone()
        return status, fence, previous_owner, ids, claimed

    def insert_event(self, db: BaseDatabaseWrapper, cursor: Any, params: dict[str, Any]) -> int:
        return int(cursor.execute(EVENT, params).lastrowid)

    def start_session(
        self, db: BaseDatabaseWrapper, cursor: Any, params: dict[str, Any], code: dict[str, str]
    ) -> Started | None:
        # The transaction holds the write lock from its BEGIN: no unregister can come between
        # the versions read and the writes.
        registered = cursor.execute(REGISTERED_VERSIONS, params).fetchall()
        chosen = next((v for v, fingerprint in registered if code.get(v) == fingerprint), None)
        if chosen is None:
            return None
        data = {"agent": params["agent"], "version": chosen}
        params = {
            **params,
            "r_version": chosen,
            "r_fingerprint": code[chosen],
            "run": params["r_id"],
            "key": "",
            "data": self.json(db, data),
        }
        cursor.execute(INSERT_SESSION, params)
        cursor.execute(INSERT_RUN, params)
        event_id = self.insert_event(db, cursor, params)
        # The run's row is what was inserted: SQLite keeps the values as they were sent.
        return [params[name] for name in _RUN_PARAMS], event_id

    def record_statements(self) -> dict[str, str]:
        return {
            "fence": FENCED,
            "new": NEW_OPERATION,
            "reintent": REINTENT,
            "outcome": OUTCOME,
            "event": RUNTIME_EVENT,
            "carried_outcome": CARRIED_OUTCOME,
            "carried_events": TWO_EVENTS,
        }


DIALECT = Sqlite()

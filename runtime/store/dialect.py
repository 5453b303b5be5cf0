"""What differs between the databases, behind one interface: a dialect per database.

The hot path — the intent and the outcome of every call, and the run's move out of `running` —
runs raw statements on the DB-API connection under Django's, because the ORM and Django's
transaction bookkeeping cost more than the commit itself (bench/overhead.py measures it). A
record is a read and two writes: the fence (the run, while it is still ours), the operation
row, and its event; a record may also carry the held outcome of the call before it
(the fold, runtime/store/worker.py). How those three are sent is the dialect's business:
runtime/store/postgres.py makes them one statement, runtime/store/sqlite.py three statements in
one IMMEDIATE transaction (four when it carries an outcome).
"""

from __future__ import annotations

import datetime as dt
import functools
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ClassVar, Literal, TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model
from django.db.models.base import ModelState

from runtime import jsonvalues
from runtime.models import Run

M = TypeVar("M", bound=Model)

# The operation updates of the hot path: a re-run's intent, and an outcome.
OperationUpdate = Literal["reintent", "outcome"]

# What a claim took over: the run's status and fence before it, its owner then, the ids of the
# claim's events in log order, and the claimed run's row (sql.CLAIMED_RUN_COLUMNS).
Claimed = tuple[str, int, str, list[int], Sequence[Any]]

# What starting a session wrote: its run's row as the database holds it (every column, in the
# order of the run's fields), and the id of the run's SUBMITTED event.
Started = tuple[list[Any], int]


class Dialect(ABC):
    """The statements of one database and how they are sent. Each method that writes a fenced
    record returns None, having written nothing, when the fence did not hold."""

    vendor: ClassVar[str]
    # Whether a record is one statement, which may then commit alone (autocommit).
    one_statement: ClassVar[bool]
    # Whether events commit in the order of their ids (one writer at a time draws and commits
    # them), so that every id below a committed one has committed (reads.committed_through).
    ids_commit_in_order: ClassVar[bool]

    @abstractmethod
    def cursor(self, db: BaseDatabaseWrapper) -> AbstractContextManager[Any]:
        """A DB-API cursor on the connection under `db`."""

    @abstractmethod
    def execute(
        self, db: BaseDatabaseWrapper, cursor: Any, sql: str, params: dict[str, Any]
    ) -> Any:
        """Run one statement written with named `%(name)s` parameters."""

    @abstractmethod
    def begin(self, db: BaseDatabaseWrapper) -> AbstractContextManager[Any]:
        """A transaction of raw statements outside any of Django's; yields its cursor."""

    @abstractmethod
    def new_operation(
        self, db: BaseDatabaseWrapper, cursor: Any, params: dict[str, Any], *, carried: bool
    ) -> tuple[list[int], int] | None:
        """Fence, operation INSERT, events: (the event ids in log order, the operation id).

        `carried`: the record also writes a held outcome, from the parameters prefixed `p_`
        (op, status, result, is_error, error, usage, key, event, data, now), its event first.
        The same holds for the two methods below."""

    @abstractmethod
    def update_operation(
        self,
        db: BaseDatabaseWrapper,
        cursor: Any,
        which: OperationUpdate,
        params: dict[str, Any],
        *,
        carried: bool,
    ) -> list[int] | None:
        """Fence, operation UPDATE, events: the event ids in log order."""

    @abstractmethod
    def move_owned(
        self,
        db: BaseDatabaseWrapper,
        cursor: Any,
        assignments: str,
        params: dict[str, Any],
        *,
        carried: bool,
    ) -> list[int] | None:
        """The owned run's move out of `running` (itself the fence) and its events: their ids
        in log order. `assignments` is the SET list, columns and named parameters."""

    @abstractmethod
    def claim(self, db: BaseDatabaseWrapper, params: dict[str, Any]) -> Claimed | None:
        """Take the runnable run, guarded on the status and fence it had, with the claim's
        events (worker.claim's parameters; its `_claim_events` says which): what was taken over,
        the event ids and the claimed run, or None, having written nothing, if the run was not
        claimable."""

    @abstractmethod
    def insert_event(self, db: BaseDatabaseWrapper, cursor: Any, params: dict[str, Any]) -> int:
        """One event row: its id."""

    @abstractmethod
    def start_session(
        self, db: BaseDatabaseWrapper, cursor: Any, params: dict[str, Any], code: dict[str, str]
    ) -> Started | None:
        """A new session (parameters prefixed `s_`), its first run (`r_`; its version and
        fingerprint are chosen here) and the run's SUBMITTED event (event, actor, now), on the
        newest registered version of `agent` whose fingerprint is `code`'s (each version in the
        code, and its fingerprint), its registration locked: what was written, or None, having
        written nothing, when no registered version matches the code."""

    @abstractmethod
    def record_statements(self) -> dict[str, str]:
        """The record statements as sent, by name, for benchmarks that replay them alone."""

    # --- shared -------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, db: BaseDatabaseWrapper) -> Iterator[Any]:
        """A transaction for raw statements; yields the DB-API cursor to run them on.

        Inside a caller's transaction (a verb's `atomic()`, a test) it is a savepoint of it, so
        it still rolls back alone and its events publish on the outer commit. Otherwise it is
        opened and closed on the DB-API connection directly: Django's atomic() bookkeeping
        costs more than SQLite's commit.
        """
        with db.wrap_database_errors:
            if db.in_atomic_block:
                with transaction.atomic(using=db.alias), self.cursor(db) as cursor:
                    yield cursor
            else:
                with self.begin(db) as cursor:
                    yield cursor

    def write(self, db: BaseDatabaseWrapper) -> AbstractContextManager[Any]:
        """A cursor for one write of the store: where the write is one statement and no
        caller's transaction is open, the statement commits alone (autocommit: no BEGIN and
        COMMIT round trips); otherwise the write is a `transaction` (a savepoint of the
        caller's)."""
        if self.one_statement and not db.in_atomic_block:
            return self._alone(db)
        return self.transaction(db)

    @contextmanager
    def _alone(self, db: BaseDatabaseWrapper) -> Iterator[Any]:
        with db.wrap_database_errors, self.cursor(db) as cursor:
            yield cursor

    def run_id(self, db: BaseDatabaseWrapper, run_id: Any) -> Any:
        # A native uuid on PostgreSQL, 32 hex digits on SQLite: what the ORM would send.
        return Run._meta.pk.get_db_prep_value(run_id, db)

    def json(self, db: BaseDatabaseWrapper, value: Any) -> Any:
        # None is SQL NULL, as the ORM saves it (never the JSON null); otherwise the text
        # Django's adapter writes (db.ops.adapt_json_value), without its json.dumps per value.
        return None if value is None else jsonvalues.dumps(value)

    def moment(self, db: BaseDatabaseWrapper, value: dt.datetime | None) -> Any:
        return db.ops.adapt_datetimefield_value(value)

    def instance(self, db: BaseDatabaseWrapper, model: type[M], row: Sequence[Any]) -> M:
        """The `model` a raw row of all its columns stands for, in their order, with its values
        converted as a query of the ORM converts them (JSON parsed; on SQLite, text to uuids
        and datetimes): without compiling a query, which costs more than running this one."""
        values = list(row)
        for index, (converters, column) in _converters(db, model).items():
            for convert in converters:
                values[index] = convert(values[index], column, db)
        fields = [field.attname for field in model._meta.concrete_fields]
        return model.from_db(db.alias, fields, values)


def built(model: type[M], alias: str, values: dict[str, Any]) -> M:
    """The `model` a query of database `alias` returns for a row of these values (every
    column's, by attname, as Python values), built as `from_db` builds it but without
    Model.__init__: its setattr per field and its two signals cost more than the rest of a
    record's Python. The models built here (operations, events) have no init receivers."""
    instance = model.__new__(model)
    state = instance._state = ModelState()
    state.adding, state.db = False, alias
    instance.__dict__.update(values)
    return instance


# A row's converters (each a function of the value, the column and the connection), by column
# index: what the ORM's compiler builds for every query, built here once per connection.
Converters = dict[int, tuple[list[Callable[[Any, Any, Any], Any]], Any]]
_CONVERTERS: weakref.WeakKeyDictionary[BaseDatabaseWrapper, dict[type[Model], Converters]] = (
    weakref.WeakKeyDictionary()
)


def _converters(db: BaseDatabaseWrapper, model: type[Model]) -> Converters:
    by_model = _CONVERTERS.setdefault(db, {})
    found = by_model.get(model)
    if found is None:
        found = by_model[model] = {}
        for index, field in enumerate(model._meta.concrete_fields):
            column = field.get_col(model._meta.db_table)
            converters = db.ops.get_db_converters(column) + column.get_db_converters(db)
            if converters:
                found[index] = (converters, column)
    return found


def connection() -> BaseDatabaseWrapper:
    """The default database, connected (and reconnected if its health check failed)."""
    db = connections[DEFAULT_DB_ALIAS]
    db.close_if_health_check_failed()
    db.ensure_connection()
    return db


def dialect_of(db: BaseDatabaseWrapper) -> Dialect:
    return _dialect(db.vendor)


@functools.cache
def _dialect(vendor: str) -> Dialect:
    from runtime.store import postgres, sqlite

    found = {"postgresql": postgres.DIALECT, "sqlite": sqlite.DIALECT}.get(vendor)
    if found is None:
        raise ImproperlyConfigured(
            f"the runtime's store supports PostgreSQL and SQLite, not {vendor}"
        )
    return found

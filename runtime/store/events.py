"""The event log: appended by every write of the store, published after its commit."""

from __future__ import annotations

import datetime as dt
from typing import Any, NamedTuple

from django.conf import settings
from django.db.backends.base.base import BaseDatabaseWrapper

from runtime import clock, dispatch
from runtime.models import RUNTIME, Event
from runtime.store.dialect import Dialect, built, connection, dialect_of


class Written(NamedTuple):
    """An event as written: the run's, by the runtime unless an actor is named. A tuple: every
    record builds one or two, and a frozen dataclass's construction cost more."""

    run_id: Any
    kind: str
    key: str
    data: dict[str, Any]
    now: dt.datetime
    actor: str = RUNTIME

    def params(self, db: BaseDatabaseWrapper, dialect: Dialect) -> dict[str, Any]:
        return {
            "run": None if self.run_id is None else dialect.run_id(db, self.run_id),
            "event": self.kind,
            "actor": self.actor,
            "key": self.key,
            "data": dialect.json(db, self.data),
            "now": dialect.moment(db, self.now),
        }


def published(db: BaseDatabaseWrapper, event_id: int, written: Written) -> Event:
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
    created = built(Event, db.alias, values)
    dispatch.publish_on_commit(created)
    return created


def publishing() -> bool:
    """Whether anyone listens to the events (as dispatch): if not, the hot path builds none."""
    return bool(getattr(settings, "AGENTOPS_PUBLISH", ""))


def publish(db: BaseDatabaseWrapper, event_id: int, written: Written) -> None:
    """Publish an event of the hot path, if anyone listens."""
    if publishing():
        published(db, event_id, written)


def event(run_id: Any, kind: str, actor: str = RUNTIME, key: str = "", **data: Any) -> Event:
    """Append one event; live updates go out after the surrounding transaction commits."""
    db = connection()
    dialect = dialect_of(db)
    written = Written(run_id, kind, key, data, clock.now(), actor)
    with db.wrap_database_errors, dialect.cursor(db) as cursor:
        event_id = dialect.insert_event(db, cursor, written.params(db, dialect))
    return published(db, event_id, written)

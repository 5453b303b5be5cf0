"""The queries of the sweep and of recovery: what to pick up, and what the log says."""

from __future__ import annotations

import uuid

from runtime import clock
from runtime.models import RUNTIME, Event, EventKind, Run
from runtime.store import sql
from runtime.store.dialect import connection


def due_run_ids(limit: int = 500) -> list[uuid.UUID]:
    """Runs a worker should pick up now: the sweep's and the startup discovery's query."""
    db = connection()
    params = {"now": db.ops.adapt_datetimefield_value(clock.now()), "limit": limit}
    with db.cursor() as cursor:
        cursor.execute(sql.DUE, params)
        return [uuid.UUID(str(row[0])) for row in cursor.fetchall()]


def intents_since_a_person_acted(run: Run, key: str) -> int:
    """Intents written for `key` since a person last acted on the run (submitted, retried,
    resolved, …): the attempts an operation has made on its own, for its crash budget."""
    last = Event.objects.filter(run=run).exclude(actor=RUNTIME).order_by("-id").values("id").first()
    return Event.objects.filter(
        run=run, operation_key=key, kind=EventKind.INTENT, id__gt=last["id"] if last else 0
    ).count()


def last_word_is_outcome(run: Run, key: str) -> bool:
    """Whether the outcome of `key` is the last thing written for the run, claims aside: the
    outcome committed and the run's move after it did not (its worker died in between)."""
    last = (
        Event.objects.filter(run=run)
        .exclude(kind__in=(EventKind.CLAIMED, EventKind.LEASE_EXPIRED))
        .order_by("-id")
        .values("kind", "operation_key")
        .first()
    )
    return last is not None and last["kind"] == EventKind.OUTCOME and last["operation_key"] == key

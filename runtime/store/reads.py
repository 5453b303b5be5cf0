"""The queries of the sweep and of recovery: what to pick up, and what the log says; and the
counts by status the database keeps."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Sum

from runtime import clock
from runtime.models import RUNTIME, Event, EventKind, Run, StatusCount
from runtime.store import sql
from runtime.store.dialect import connection

# The sweep's hand-over: the runs that can move now and were not sent within the lease period,
# or were taken by a worker since (a claim moves updated_at: a retry due at once after a failed
# attempt is not held back), marked sent by the same statement. The outer WHERE repeats the rule
# so that of two sweeps racing on a run (PostgreSQL re-reads a row it waited for), one sends it.
_SENDABLE = f"{sql.RUNNABLE} AND (sent_at IS NULL OR sent_at <= %(resend)s OR updated_at > sent_at)"
SEND = f"""
UPDATE {sql.RUN} SET sent_at = %(now)s
WHERE {_SENDABLE} AND id IN (
    SELECT id FROM {sql.RUN} WHERE {_SENDABLE} ORDER BY updated_at LIMIT %(limit)s)
RETURNING id"""


def due_run_ids(limit: int = 500) -> list[uuid.UUID]:
    """Runs a worker should pick up now, each marked sent: the sweep's and the startup
    discovery's query. A run sent within the lease period is not sent again; one whose message
    was lost (the broker was down, its worker died before taking it) is, once the period ends."""
    db = connection()
    now = clock.now()
    resend = now - dt.timedelta(seconds=float(settings.AGENTOPS_LEASE_SECONDS))
    params = {
        "now": db.ops.adapt_datetimefield_value(now),
        "resend": db.ops.adapt_datetimefield_value(resend),
        "limit": limit,
    }
    with db.cursor() as cursor:
        cursor.execute(SEND, params)
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


@dataclass(frozen=True)
class Counts:
    """Runs by status and pending interactions by kind, as the triggers of migration 0008 keep
    them (statuses and kinds with none are absent)."""

    runs: dict[str, int]
    pending: dict[str, int]


def counts() -> Counts:
    """The kept counts, in one query over a few rows: no table is scanned, whatever its size."""
    runs: dict[str, int] = {}
    pending: dict[str, int] = {}
    rows = StatusCount.objects.order_by().values_list("key").annotate(total=Sum("n"))
    for key, total in rows:
        table, _, value = key.partition(":")
        if total:
            (runs if table == "run" else pending)[value] = int(total)
    return Counts(runs=runs, pending=pending)


# The deltas the PostgreSQL triggers inserted, folded into one row per key. Of sweeps racing,
# each delta is taken by one: a row another deletes is skipped once that one commits.
_COMPACT = f"""
WITH taken AS (DELETE FROM {StatusCount._meta.db_table} RETURNING key, n)
INSERT INTO {StatusCount._meta.db_table} (key, n)
SELECT key, sum(n) FROM taken GROUP BY key HAVING sum(n) <> 0"""


def compact_counts() -> None:
    """The sweep's step: fold the kept counts' deltas, so that reading them stays a few rows.
    (SQLite's triggers keep one row per key already.)"""
    db = connection()
    if db.vendor == "postgresql":
        with db.cursor() as cursor:
            cursor.execute(_COMPACT)

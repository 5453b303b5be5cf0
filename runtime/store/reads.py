"""The queries of the sweep and of recovery: what to pick up, and what the log says; and the
counts by status the database keeps."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Sum

from runtime import clock
from runtime.models import Event, EventKind, Run, StatusCount
from runtime.store import sql
from runtime.store.dialect import connection, dialect_of

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


# How far below the newest event `committed_through` looks for an id that has not committed.
CURSOR_WINDOW = 1000
# Of the newest CURSOR_WINDOW event ids, the lowest with a hole above it that may still fill
# (or the newest). Each id's next is the one before it, newest first, as the index gives them;
# only the event above a hole is read from the table.
COMMITTED_THROUGH = f"""
WITH newest AS (SELECT id FROM {sql.EVENT} ORDER BY id DESC LIMIT %(window)s),
above AS (SELECT id, lag(id) OVER (ORDER BY id DESC) AS next_id FROM newest)
SELECT coalesce(
    (SELECT min(above.id) FROM above JOIN {sql.EVENT} AS next ON next.id = above.next_id
     WHERE above.next_id <> above.id + 1 AND next.created_at > %(settled)s),
    (SELECT max(id) FROM newest),
    0)"""


def holes_settled_before() -> dt.datetime:
    """A hole in the event ids below an event created before this is a rolled-back insert, not
    an event still to commit: no write transaction stays open that long
    (AGENTOPS_OUTBOX_GAP_SECONDS).

    Ids are drawn as events are inserted, and on PostgreSQL transactions commit in any order:
    an event can commit after a newer one, and a rolled-back insert leaves a hole for good. A
    reader that jumped to the newest id it saw could miss an event that commits a moment later.
    On SQLite one writer at a time draws and commits ids, and only deletions leave holes."""
    return clock.now() - dt.timedelta(seconds=float(settings.AGENTOPS_OUTBOX_GAP_SECONDS))


def settled_events(position: int, *, limit: int) -> tuple[list[int], int]:
    """The ids after `position` that are safe to consume now, in order, and the new position:
    the outbox's reading. It moves only over ids with no hole before them that may still fill."""
    rows = list(
        Event.objects.filter(pk__gt=position).order_by("pk").values_list("pk", "created_at")[:limit]
    )
    settled = holes_settled_before()
    taken: list[int] = []
    expected = position + 1
    for event_id, created_at in rows:
        if event_id != expected and created_at > settled:
            break  # an earlier id may still commit: wait for it
        taken.append(event_id)
        expected = event_id + 1
    return taken, (taken[-1] if taken else position)


def committed_through() -> int:
    """The event id through which every event has committed: a live page's cursor (it has seen
    every event up to it, and asks for those after it).

    Not the newest id, where ids may commit out of order (holes_settled_before): a page whose
    cursor had passed an event still to commit would never ask for it, and if its message
    reached the page's process before the page's socket listened, the page would miss it for
    good. So the cursor stops below the lowest hole among the newest CURSOR_WINDOW ids that
    may still fill; a hole that never will (a rolled-back insert) holds it back until it
    settles, and a page opened meanwhile asks again for a few events it has: a render, not a
    lost event."""
    db = connection()
    with db.cursor() as cursor:
        if dialect_of(db).ids_commit_in_order:
            cursor.execute(f"SELECT coalesce(max(id), 0) FROM {sql.EVENT}")
        else:
            settled = db.ops.adapt_datetimefield_value(holes_settled_before())
            cursor.execute(COMMITTED_THROUGH, {"window": CURSOR_WINDOW, "settled": settled})
        return int(cursor.fetchone()[0])


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
    last = Event.objects.filter(run=run).by_people().order_by("-id").values("id").first()
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

"""store.committed_through: the live pages' cursor stops below an event that has not committed.

On PostgreSQL an event's id is drawn as its row is inserted, and transactions commit in any
order: a page that took the newest id as its cursor would never ask for an event that commits
after a newer one. These run with real commits, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection, transaction
from django.utils.timezone import now

from runtime import store
from runtime.models import Event, EventKind
from runtime.store.dialect import dialect_of
from runtime.store.reads import CURSOR_WINDOW

pytestmark = pytest.mark.django_db(transaction=True)


def event(pk: int | None = None) -> Event:
    return Event.objects.create(
        pk=pk, kind=EventKind.AGENT_REGISTERED, actor="admin", created_at=now()
    )


def test_with_no_events_the_cursor_is_zero():
    assert store.committed_through() == 0


def test_the_cursor_is_the_newest_event_when_every_id_below_it_is_there():
    ids = [event().pk for _ in range(3)]
    assert store.committed_through() == ids[-1]


def test_the_cursor_stops_below_the_lowest_missing_id_where_ids_may_commit_out_of_order():
    """On PostgreSQL a missing id may still commit. On SQLite ids commit in the order they are
    drawn: one missing below a committed one never will (its event was deleted)."""
    out_of_order = not dialect_of(connection).ids_commit_in_order
    assert out_of_order == (connection.vendor == "postgresql")
    for pk in (101, 102, 104, 106):
        event(pk)
    assert store.committed_through() == (102 if out_of_order else 106)
    event(103)
    assert store.committed_through() == (104 if out_of_order else 106)
    event(105)
    assert store.committed_through() == 106


@pytest.mark.postgres
def test_a_hole_older_than_the_outbox_gap_is_a_rollback_and_no_longer_holds_the_cursor(settings):
    settings.AGENTOPS_OUTBOX_GAP_SECONDS = 60.0
    old = now() - dt.timedelta(seconds=61)
    for pk in (101, 103):
        Event.objects.create(pk=pk, kind=EventKind.AGENT_REGISTERED, actor="admin", created_at=old)
    event(105)
    assert store.committed_through() == 103  # 102 settled as a rollback; 104 may still commit
    settings.AGENTOPS_OUTBOX_GAP_SECONDS = 120.0
    assert store.committed_through() == 101


@pytest.mark.postgres
def test_a_gap_holds_the_cursor_until_it_is_older_than_the_window():
    """An id missing for good (rolled back, or its run deleted) holds pages' cursors back only
    while it is among the newest CURSOR_WINDOW ids."""
    Event.objects.bulk_create(
        Event(pk=pk, kind=EventKind.AGENT_REGISTERED, actor="admin", created_at=now())
        for pk in [1, *range(3, CURSOR_WINDOW + 2)]
    )
    assert store.committed_through() == 1  # 2 is among the newest CURSOR_WINDOW ids
    event(CURSOR_WINDOW + 2)
    assert store.committed_through() == CURSOR_WINDOW + 2


@pytest.mark.postgres
def test_on_postgres_the_cursor_stops_below_an_event_whose_transaction_is_still_open():
    """Two writers: the first draws its event's id and waits; the second's newer event commits.
    The cursor must not pass the first's id until it commits."""
    inserted, release = threading.Event(), threading.Event()
    drawn: list[int] = []

    def first_writer() -> None:
        try:
            with transaction.atomic():
                drawn.append(event().pk)
                inserted.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    before = event().pk
    writer = threading.Thread(target=first_writer)
    writer.start()
    try:
        assert inserted.wait(timeout=30)
        newer = event().pk
        assert newer > drawn[0] > before
        assert store.committed_through() == before
    finally:
        release.set()
        writer.join()
    assert store.committed_through() == newer

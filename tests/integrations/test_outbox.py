"""The outbox cursor: never past an event id that may still commit."""

from __future__ import annotations

import datetime as dt

from runtime import clock, store
from runtime.models import Event


def test_the_cursor_waits_at_a_recent_hole_and_passes_a_settled_one(approval_run, settings):
    run, _ = approval_run()
    last = Event.objects.order_by("-pk").first()
    assert last is not None
    # A hole: id last+1 is taken by a transaction that has not committed (or never will).
    Event.objects.create(
        pk=last.pk + 2, run=run, kind="later", actor="runtime", created_at=clock.now()
    )
    ids, position = store.settled_events(last.pk, limit=100)
    assert (ids, position) == ([], last.pk)

    settings.AGENTOPS_OUTBOX_GAP_SECONDS = 0.0
    ids, position = store.settled_events(last.pk, limit=100)
    assert (ids, position) == ([last.pk + 2], last.pk + 2)


def test_contiguous_events_pass_at_once_up_to_the_limit(approval_run):
    approval_run()
    ids = list(Event.objects.order_by("pk").values_list("pk", flat=True))
    taken, position = store.settled_events(ids[0] - 1, limit=2)
    assert taken == ids[:2]
    assert position == ids[1]


def test_a_hole_before_old_events_is_settled(approval_run, settings):
    run, _ = approval_run()
    last = Event.objects.order_by("-pk").first()
    old = clock.now() - dt.timedelta(seconds=settings.AGENTOPS_OUTBOX_GAP_SECONDS + 1)
    # Far ahead: on PostgreSQL the id sequence does not know of this row and must not reach it.
    Event.objects.create(pk=last.pk + 1000, run=run, kind="x", actor="runtime", created_at=old)
    taken, position = store.settled_events(last.pk, limit=100)
    assert (taken, position) == ([last.pk + 1000], last.pk + 1000)

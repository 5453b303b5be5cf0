"""The embedded setup, end to end in a browser: one `manage.py serve` process (console, Celery
worker on the in-memory broker, in-memory channel layer) on the database file, nothing else.

Runs in both passes: SQLite (the README's setup) and PostgreSQL.
"""

from __future__ import annotations

import pytest

from runtime.models import Event, EventKind, RunStatus
from tests.browser.browsing import Shots, click_for_answer, inbox_row

pytestmark = pytest.mark.django_db(transaction=True)


def _resize(page, selector: str) -> None:
    """Drag the bottom-right corner of a textarea, as a person enlarging it does."""
    box = page.locator(selector).bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] - 3, box["y"] + box["height"] - 3)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] + 80, box["y"] + box["height"] + 60, steps=4)
    page.mouse.up()
    assert "height" in (page.locator(selector).get_attribute("style") or "")


def test_it_approves_a_refund_in_the_embedded_setup(embedded_desk, people, shots: Shots):
    desk, stack = embedded_desk
    alice = people(stack, "alice")
    inbox = alice.open("/")
    alice.mark()
    alice.shot("inbox")

    # The in-process worker finds the run through its sweep, and the page hears of it live.
    run = desk.submit("Please refund $40 of order 1001, the bowl arrived cracked.")
    row = inbox_row(inbox, "approvals", run)
    row.wait_for(timeout=20_000)
    assert alice.still_same_document()
    alice.shot("approval-arrived")

    row.get_by_role("link", name="Review").click()
    alice.wait_live()
    # The operator makes the reason box bigger, then rejects without writing a reason: refused,
    # and the swapped-in form must not trip the CSP over the box's (inline) size.
    interaction = desk.pending(run)
    _resize(inbox, f"#reason-{interaction.pk}")
    answer = click_for_answer(inbox, inbox.get_by_role("button", name="Reject"), "/respond/")
    assert answer.status == 400
    inbox.locator("[role=alert]", has_text="a rejection needs a reason").wait_for()
    assert alice.watch.problems() == []
    alice.shot("reject-without-reason")

    inbox.get_by_role("button", name="Approve", exact=True).click()
    inbox.locator(".decided").wait_for()
    inbox.get_by_role("link", name="Follow the run").click()
    alice.wait_live()
    inbox.locator("#run-header .badge", has_text="completed").wait_for(timeout=20_000)
    alice.shot("run-completed")

    finished = desk.wait_status(run, RunStatus.COMPLETED)
    assert finished.output.startswith("Refunded $40.00 of order 1001, receipt re_")
    assert desk.refunds("1001") == 1
    assert (
        Event.objects.filter(run=run, kind=EventKind.APPROVAL_GRANTED, actor="alice").count() == 1
    )
    assert inbox.locator("#run-timeline li.kind-approval-granted .actor").inner_text() == "alice"

"""Reconciling an uncertain refund in the browser, after a real worker was killed mid-call.

The worker is a `celery worker` process started with AGENTOPS_CRASH_AT=after_handler:refund_order:
it SIGKILLs itself after the payments service made the refund and before the outcome was
written. A fresh worker recovers the run to needs_attention (refund_order is `manual`), and an
operator settles it from what the payments service says.
"""

from __future__ import annotations

import json
import signal

import pytest

from demo.models import Refund
from runtime import respond
from runtime.models import Event, EventKind, Operation, OperationStatus, RunStatus
from tests.browser.a11y import shot_and_checked
from tests.browser.browsing import click_for_answer, inbox_row, text_of

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

CRASH = "after_handler:refund_order"


def _crash_after_the_refund(desk, stack, message: str, *, agent: str = "refund-desk"):
    """A run whose refund happened in the payments service, and whose worker died right after.

    Returns the run, still `running` under the dead worker's lease.
    """
    run = desk.submit(message, agent=agent)
    desk.wait_status(run, RunStatus.WAITING)
    crashing = stack.crash_worker(CRASH)
    respond(desk.pending(run).pk, {"approved": True, "reason": ""}, actor="dana")
    assert crashing.wait_exit(60) == -signal.SIGKILL, stack.logs()
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING  # as the dead worker left it
    assert desk.refunds() == 1  # the payments service did refund
    return run


def test_it_reconciles_an_uncertain_refund_with_the_receipt_the_lookup_finds(desk, people, stack):
    run = _crash_after_the_refund(
        desk, stack, "Refund $25 for order 1002: the left ear cup crackles."
    )
    refund = Refund.objects.get()
    alice = people(stack, "alice")
    inbox = alice.open("/")
    alice.mark()

    # A fresh worker takes the run over once the dead one's lease expires, and stops it there.
    stack.start_worker()
    row = inbox_row(inbox, "attention", run)
    row.wait_for(timeout=30_000)
    assert alice.still_same_document()
    run = desk.wait_status(run, RunStatus.NEEDS_ATTENTION)
    op = Operation.objects.get(run=run, key=run.blocked_operation)
    assert (op.name, op.status) == ("refund_order", OperationStatus.STARTED)
    assert op.operation_id in row.inner_text()
    alice.shot("inbox-needs-attention")

    row.get_by_role("link", name="Reconcile").click()
    alice.wait_live()
    page = alice.page
    assert page.locator(".opid").inner_text() == op.operation_id
    found = json.loads(page.locator(".lookup.found pre").inner_text())
    assert found == {
        "amount_cents": 2500,
        "order_number": "1002",
        "receipt_id": refund.receipt_id,
    }
    shot_and_checked(alice, "reconcile-lookup-found")  # a blocked state passes axe too

    # Leaving it blocked keeps it blocked.
    page.get_by_role("link", name="Leave it blocked").click()
    page.wait_for_url(f"**/runs/{run.pk}/")
    alice.wait_live()
    assert page.locator("#run-header .badge").inner_text() == "needs attention"
    assert op.operation_id in page.locator("#run-header").inner_text()
    run.refresh_from_db()
    assert (run.status, run.blocked_operation) == (RunStatus.NEEDS_ATTENTION, op.key)
    shot_and_checked(alice, "left-blocked")

    page.locator("#run-header").get_by_role("link", name="Reconcile").click()
    alice.wait_live()
    evidence = f"Payments admin shows receipt {refund.receipt_id}: $25.00 on order 1002."
    page.fill("#evidence", evidence)
    confirm = page.get_by_role("button", name="Confirm what the external system reports")
    answer = click_for_answer(page, confirm, "/resolve/")
    assert answer.status == 200
    assert "Reconciled refund_order with your evidence: the run continues." in answer.text()
    page.locator(".decided", has_text="Reconciled by alice").wait_for()
    alice.shot("reconciled")

    finished = desk.wait_status(run, RunStatus.COMPLETED)
    assert finished.output == (f"Refunded $25.00 of order 1002, receipt {refund.receipt_id}.")
    assert desk.refunds() == 1  # nothing ran twice
    resolved = Event.objects.get(run=run, kind=EventKind.OPERATION_RESOLVED)
    assert (resolved.actor, resolved.data["evidence"]) == ("alice", evidence)

    page.goto(f"/runs/{run.pk}/")
    alice.wait_live()
    reconciled = page.locator("#run-timeline li.kind-operation-resolved")
    assert reconciled.locator(".actor").inner_text() == "alice"
    assert f"Evidence: {evidence}" in reconciled.inner_text()
    alice.shot("run-completed")


def test_it_refuses_a_typed_receipt_that_fails_the_schema_and_changes_nothing(desk, people, stack):
    # ledger-desk's refund tool cannot look a refund up: the operator types what they found.
    run = _crash_after_the_refund(
        desk, stack, "Refund $25 for order 1002: the left ear cup crackles.", agent="ledger-desk"
    )
    refund = Refund.objects.get()
    stack.start_worker()
    run = desk.wait_status(run, RunStatus.NEEDS_ATTENTION)
    events_before = Event.objects.filter(run=run).count()

    alice = people(stack, "alice")
    page = alice.open(f"/runs/{run.pk}/reconcile/")
    assert "cannot look its effect up" in page.locator(".lookup.none").inner_text()
    page.fill("#result", json.dumps({"receipt_id": "RCPT 2500", "order_number": "1002"}))
    page.fill("#evidence", "Read it off the payments admin.")
    resolve = page.get_by_role("button", name="Resolve with this verified result")
    assert click_for_answer(page, resolve, "/resolve/").status == 400
    error = page.locator("#reconcile [role=alert]")
    error.wait_for()
    assert "receipt_id" in error.inner_text()
    assert "amount_cents" in error.inner_text()
    alice.shot("receipt-refused")

    # Nothing changed: still blocked on the same call, no outcome, no new event.
    run.refresh_from_db()
    op = Operation.objects.get(run=run, key=run.blocked_operation)
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert op.status == OperationStatus.STARTED
    assert Event.objects.filter(run=run).count() == events_before

    receipt = {"receipt_id": refund.receipt_id, "order_number": "1002", "amount_cents": 2500}
    page.fill("#result", json.dumps(receipt))
    page.fill("#evidence", f"Payments admin: {refund.receipt_id}, $25.00, order 1002.")
    assert click_for_answer(page, resolve, "/resolve/").status == 200
    page.locator(".decided", has_text="Reconciled by alice").wait_for()
    alice.shot("receipt-accepted")
    finished = desk.wait_status(run, RunStatus.COMPLETED)
    assert refund.receipt_id in finished.output
    assert desk.refunds() == 1
    assert refund.receipt_id in text_of(page, "#reconcile")

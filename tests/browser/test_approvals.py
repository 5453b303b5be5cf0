"""Approving tool calls in the browser, with the real worker doing the rest.

The refund desk asks to refund an order; an operator approves or rejects it from the live inbox;
the payments service shows what really happened.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from demo.models import Refund
from runtime.models import Event, EventKind, Interaction, RunStatus
from tests.browser.browsing import click_for_answer, inbox_row, text_of

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

REFUND_1001 = "Please refund $40 of order 1001, the bowl arrived cracked."


def test_it_approves_a_refund_from_the_live_inbox_and_refunds_once(desk, people, stack):
    alice = people(stack, "alice")
    inbox = alice.open("/")
    alice.mark()
    alice.shot("inbox-empty")

    run = desk.submit(REFUND_1001)
    # The approval arrives over the websocket: the page is never reloaded.
    row = inbox_row(inbox, "approvals", run)
    row.wait_for()
    assert alice.still_same_document()
    assert "refund_order" in row.inner_text()
    assert '"order_number":"1001"' in row.inner_text().replace(" ", "")
    alice.shot("inbox-approval-arrived")

    row.get_by_role("link", name="Review").click()
    inbox.wait_for_url(f"**/interactions/{desk.pending(run).pk}/")
    alice.wait_live()
    assert inbox.locator("h1 code").inner_text() == "refund_order"
    arguments = json.loads(text_of(inbox, "pre.args"))
    assert arguments["order_number"] == "1001"
    assert arguments["amount_cents"] == 4000
    assert "bowl arrived cracked" in text_of(inbox, ".context")
    alice.shot("approval-page")

    answer = click_for_answer(
        inbox, inbox.get_by_role("button", name="Approve", exact=True), "/respond/"
    )
    assert answer.status == 200
    assert "Approved refund_order: the run continues." in answer.text()
    inbox.locator(".decided", has_text="Approved by alice").wait_for()
    alice.shot("approved")

    inbox.get_by_role("link", name="Follow the run").click()
    inbox.wait_for_url(f"**/runs/{run.pk}/")
    alice.wait_live()
    inbox.locator("#run-header .badge", has_text="completed").wait_for()
    finished = desk.wait_status(run, RunStatus.COMPLETED)
    alice.shot("run-completed")

    # Exactly one refund, made under the call's operation id.
    interaction = Interaction.objects.get(run=run)
    refund_op = run.operations.get(name="refund_order")
    assert desk.refunds() == 1
    assert desk.refunds("1001") == 1
    refund = Refund.objects.get()
    assert (refund.amount_cents, refund.idempotency_key) == (4000, refund_op.operation_id)
    assert refund.receipt_id in finished.output
    assert refund.receipt_id in inbox.locator("#run-header .output").inner_text()

    # The timeline says who approved, and when.
    approved = inbox.locator("#run-timeline li.kind-approval-granted")
    assert approved.count() == 1
    assert approved.locator(".actor").inner_text() == "alice"
    when = dt.datetime.fromisoformat(approved.locator(".when time").get_attribute("datetime"))
    assert abs(when - interaction.responded_at) < dt.timedelta(seconds=1)
    assert (
        Event.objects.filter(run=run, kind=EventKind.APPROVAL_GRANTED, actor="alice").count() == 1
    )


def test_it_rejects_with_a_reason_the_model_reads_and_refunds_nothing(desk, people, stack):
    alice = people(stack, "alice")
    run = desk.submit("Please refund $18 of order 1002, the case is scratched.")
    desk.wait_status(run, RunStatus.WAITING)
    interaction = desk.pending(run)

    page = alice.open(f"/interactions/{interaction.pk}/")
    reason = "The customer already got a $20 voucher for this scratch: no refund."
    # Rejecting without a reason is refused and changes nothing.
    answer = click_for_answer(page, page.get_by_role("button", name="Reject"), "/respond/")
    assert answer.status == 400
    page.locator("[role=alert]").wait_for()
    assert "reason" in page.locator("[role=alert]").inner_text().lower()
    assert desk.pending(run).pk == interaction.pk
    alice.shot("reject-without-reason-refused")

    page.fill(f"#reason-{interaction.pk}", reason)
    answer = click_for_answer(page, page.get_by_role("button", name="Reject"), "/respond/")
    assert answer.status == 200
    assert "Rejected refund_order: the agent will see your reason." in answer.text()
    page.locator(".decided", has_text="Rejected by alice").wait_for()
    assert f"Reason: {reason}" in page.locator(".decided").inner_text()
    alice.shot("rejected")

    page.get_by_role("link", name="Follow the run").click()
    alice.wait_live()
    page.locator("#run-header .badge", has_text="completed").wait_for()
    finished = desk.wait_status(run, RunStatus.COMPLETED)
    alice.shot("run-completed-without-refund")

    # The model read the reason: its final answer quotes it.
    assert reason in finished.output
    assert reason in page.locator("#run-header .output").inner_text()
    assert desk.refunds() == 0
    rejected = page.locator("#run-timeline li.kind-approval-rejected")
    assert rejected.locator(".actor").inner_text() == "alice"
    assert f"Reason: {reason}" in rejected.inner_text()


def test_it_lets_one_of_two_operators_decide_and_shows_the_other_who(desk, people, stack):
    alice, bob = people(stack, "alice"), people(stack, "bob")
    run = desk.submit("Refund $30 for order 1003, the grinder is noisy.")
    desk.wait_status(run, RunStatus.WAITING)
    interaction = desk.pending(run)
    path = f"/interactions/{interaction.pk}/"
    alice_page, bob_page = alice.open(path), bob.open(path)
    bob_page.fill(f"#reason-{interaction.pk}", "Noise is normal for this grinder.")
    alice.shot("before")
    bob.shot("before")

    def respond(response) -> bool:
        return response.url.endswith(f"{path}respond/")

    # Both click at once: each request leaves before either answer comes back.
    with (
        alice_page.expect_response(respond) as alice_answer,
        bob_page.expect_response(respond) as bob_answer,
    ):
        alice_page.get_by_role("button", name="Approve", exact=True).click(no_wait_after=True)
        bob_page.get_by_role("button", name="Reject").click(no_wait_after=True)
    answers = {"alice": alice_answer.value, "bob": bob_answer.value}
    statuses = {name: answer.status for name, answer in answers.items()}
    assert sorted(statuses.values()) == [200, 409], statuses
    alice.shot("answered")
    bob.shot("answered")

    interaction.refresh_from_db()
    winner = interaction.responded_by
    loser = "bob" if winner == "alice" else "alice"
    assert statuses[winner] == 200
    # The refused one is told who answered first.
    assert f"by {winner}" in answers[loser].text()
    decisions = Event.objects.filter(run=run, kind__in=["approval_granted", "approval_rejected"])
    assert [(e.kind, e.actor) for e in decisions] == [
        ("approval_granted" if winner == "alice" else "approval_rejected", winner)
    ]

    # Both pages end up showing the one decision and who made it.
    for person, page in ((alice, alice_page), (bob, bob_page)):
        page.locator(".decided .actor", has_text=winner).wait_for()
        person.shot("after")
    loser_page = bob_page if loser == "bob" else alice_page
    assert winner in text_of(loser_page, f"#interaction-{interaction.pk}")

    finished = desk.wait_status(run, RunStatus.COMPLETED)
    assert desk.refunds() == (1 if interaction.response["approved"] else 0)
    assert finished.status == RunStatus.COMPLETED

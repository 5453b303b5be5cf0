"""The refund desk agent end to end on the runtime, with the scripted model."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from django.utils import timezone

from demo import agents
from demo.brain import RefundDeskBrain
from demo.models import Customer, Order, Refund, Ticket
from runtime import resolve, respond, submit
from runtime.models import RunStatus
from runtime.testing import SimulatedCrash, crash_at, recover, run_until_idle


@pytest.fixture
def desk(define):
    brain = RefundDeskBrain(outages=Counter())
    v1 = define(replace(agents.refund_desk_v1, llm=brain))
    customer = Customer.objects.create(name="Ada", email="ada@example.com")
    Order.objects.create(
        number="1001", customer=customer, item="Mixer", total_cents=5000, placed_at=timezone.now()
    )
    return v1


def approve(run):
    respond(run.interactions.get(status="pending").pk, {"approved": True}, actor="dana")
    return run_until_idle(run.pk)


def test_it_refunds_once_after_approval_and_opens_a_ticket(desk):
    run = run_until_idle(
        submit("refund-desk", "Refund $20 of order 1001 and open a ticket", actor="inbox").pk
    )
    assert run.status == RunStatus.WAITING
    interaction = run.interactions.get()
    assert interaction.payload["arguments"]["amount_cents"] == 2000
    run = approve(run)
    assert run.status == RunStatus.COMPLETED
    refund = Refund.objects.get()
    assert refund.idempotency_key == f"{run.pk}:step-2/tool/toolu_01_0"
    assert run.output == (
        f"Refunded $20.00 of order 1001, receipt {refund.receipt_id}. "
        f"Ticket {Ticket.objects.get().ticket_id} is open."
    )


def test_it_asks_for_a_missing_order_number(desk):
    run = run_until_idle(submit("refund-desk", "I want my money back", actor="inbox").pk)
    question = run.interactions.get()
    assert question.payload == {"question": "Which order number is this about?"}
    respond(question.pk, {"answer": "It is 1001"}, actor="dana")
    run = run_until_idle(run.pk)
    assert (
        run.interactions.filter(status="pending")
        .get()
        .payload["question"]
        .startswith("How much of order 1001")
    )


def test_the_lookup_finds_the_receipt_of_a_crashed_refund(desk):
    run = run_until_idle(submit("refund-desk", "Refund $10 of order 1001", actor="inbox").pk)
    respond(run.interactions.get().pk, {"approved": True}, actor="dana")
    with crash_at("after_handler", tool="refund_order"), pytest.raises(SimulatedCrash):
        recover(run.pk)
    run = recover(run.pk)
    assert run.status == RunStatus.NEEDS_ATTENTION
    operation_id = f"{run.pk}:{run.blocked_operation}"
    found = agents.refund_order.look_up(operation_id)
    receipt = Refund.objects.get()
    assert found == {"receipt_id": receipt.receipt_id, "order_number": "1001", "amount_cents": 1000}
    resolve(
        run.pk,
        run.blocked_operation,
        found,
        evidence=f"{receipt.receipt_id} in payments",
        actor="rita",
    )
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert Refund.objects.count() == 1
    assert receipt.receipt_id in run.output


def test_a_refused_refund_reaches_the_model(desk):
    run = run_until_idle(submit("refund-desk", "Refund $80 of order 1001", actor="inbox").pk)
    run = approve(run)
    assert run.status == RunStatus.COMPLETED
    assert "cannot refund 8000 cents of order 1001" in run.output
    assert not Refund.objects.exists()


def test_v2_is_a_different_version(desk):
    assert agents.refund_desk_v2.fingerprint != agents.refund_desk_v1.fingerprint
    assert agents.refund_desk_v2.key == ("refund-desk", "2")

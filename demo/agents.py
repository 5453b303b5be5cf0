"""The refund desk agent, in two versions, over the demo payments service.

It runs on a scripted model by default (deterministic, no network), and on Claude through the
Anthropic adapter when ANTHROPIC_API_KEY is set (model from AGENTOPS_DEMO_MODEL).
"""

from __future__ import annotations

import os
from collections import Counter

from pydantic import BaseModel, Field

from demo import payments
from demo.brain import RefundDeskBrain
from runtime import Agent, ModelRetry, Money, Presentation, ToolContext, ask_operator, tool


class OrderRef(BaseModel):
    order_number: str = Field(
        min_length=1, max_length=20, description="The order number, e.g. 1001"
    )


class OrderView(BaseModel):
    order_number: str
    customer: str
    item: str
    total_cents: int
    refunded_cents: int
    status: str


class RefundView(BaseModel):
    receipt_id: str
    amount_cents: int
    reason: str


class RefundList(BaseModel):
    order_number: str
    refunds: list[RefundView]


class RefundRequest(BaseModel):
    order_number: str = Field(min_length=1, max_length=20)
    amount_cents: int = Field(gt=0, le=10_000_000, description="Amount to refund, in cents")
    reason: str = Field(min_length=1, max_length=500)


class RefundReceipt(BaseModel):
    receipt_id: str = Field(pattern=r"^re_[0-9a-f]{12}$", description="The payments receipt id")
    order_number: str
    amount_cents: int = Field(gt=0)


class TicketRequest(BaseModel):
    order_number: str | None = Field(default=None, max_length=20)
    subject: str = Field(min_length=1, max_length=200)
    body: str = Field(min_length=1, max_length=5000)


class TicketView(BaseModel):
    ticket_id: str = Field(pattern=r"^T-[0-9A-F]{8}$")


@tool(recovery="safe")
def get_order(args: OrderRef, ctx: ToolContext) -> OrderView:
    """Look an order up: customer, item, total and how much was refunded already."""
    order = payments.get_order(args.order_number)
    return OrderView(
        order_number=order.number,
        customer=order.customer.name,
        item=order.item,
        total_cents=order.total_cents,
        refunded_cents=payments.refunded_cents(order),
        status=order.status,
    )


@tool(recovery="safe")
def lookup_refunds(args: OrderRef, ctx: ToolContext) -> RefundList:
    """List the refunds already made on an order."""
    order = payments.get_order(args.order_number)
    return RefundList(
        order_number=order.number,
        refunds=[
            RefundView(receipt_id=r.receipt_id, amount_cents=r.amount_cents, reason=r.reason)
            for r in order.refunds.all()
        ],
    )


def _ticket_lookup(operation_id: str) -> TicketView | None:
    found = payments.ticket_for_key(operation_id)
    return TicketView(ticket_id=found.ticket_id) if found else None


@tool(recovery="idempotent", lookup=_ticket_lookup)
def create_ticket(args: TicketRequest, ctx: ToolContext) -> TicketView:
    """Open a support ticket (deduplicated on the operation id)."""
    ticket = payments.create_ticket(
        args.order_number, args.subject, args.body, idempotency_key=ctx.operation_id
    )
    return TicketView(ticket_id=ticket.ticket_id)


def _refund_lookup(operation_id: str) -> RefundReceipt | None:
    found = payments.refund_for_key(operation_id)
    if found is None:
        return None
    return RefundReceipt(
        receipt_id=found.receipt_id,
        order_number=found.order.number,
        amount_cents=found.amount_cents,
    )


USD = Money("USD")
# Refunds from this amount up ask the approver to confirm once more.
HIGH_RISK_CENTS = 10_000


def _refund_facts(args: RefundRequest) -> dict[str, object]:
    """What an approver of a refund needs to know about the order, from the payments service."""
    order = payments.get_order(args.order_number)
    refunded = payments.refunded_cents(order)
    return {
        "Customer": f"{order.customer.name} <{order.customer.email}>",
        "Item": order.item,
        "Order total": order.total_cents,
        "Refunded so far": refunded,
        "Refunded after this refund": refunded + args.amount_cents,
        "Left to refund after it": order.total_cents - refunded - args.amount_cents,
    }


REFUND_PRESENTATION = Presentation(
    formats={
        "amount_cents": USD,
        "Order total": USD,
        "Refunded so far": USD,
        "Refunded after this refund": USD,
        "Left to refund after it": USD,
    },
    context=_refund_facts,
    subject=lambda args: f"order {args.order_number}",
    high_risk=lambda args: args.amount_cents >= HIGH_RISK_CENTS,
)


@tool(
    recovery="manual",
    requires_approval=True,
    lookup=_refund_lookup,
    presentation=REFUND_PRESENTATION,
)
def refund_order(args: RefundRequest, ctx: ToolContext) -> RefundReceipt:
    """Refund part or all of an order. Needs an approver; never repeated after a crash."""
    made = payments.refund(
        args.order_number, args.amount_cents, args.reason, idempotency_key=ctx.operation_id
    )
    return RefundReceipt(
        receipt_id=made.receipt_id, order_number=args.order_number, amount_cents=made.amount_cents
    )


TOOLS = [get_order, lookup_refunds, create_ticket, refund_order, ask_operator]
MODEL = os.environ.get("AGENTOPS_DEMO_MODEL", "claude-sonnet-4-5")
# Scripted unless a real model is configured; the client is not part of the fingerprint.
LLM = None if os.environ.get("ANTHROPIC_API_KEY") else RefundDeskBrain(outages=Counter())

# A model outage waits an hour before the next attempt: long enough that the tour's retry wait
# is still counting down when a reader gets to it ("Retry now" ends it early). Exact timers (no
# jitter): the countdown reads the same on every run of the tour.
RETRY = ModelRetry(max_attempts=4, initial_delay=3600, max_delay=4 * 3600, jitter=False)

V1_INSTRUCTIONS = (
    "You are the refund desk of an online shop. Look the order up before anything else. "
    "Refund only what the customer asks for and never more than is refundable. If the order "
    "number or the amount is missing, ask the operator. Open a ticket when the customer asks "
    "for one. Amounts are in cents."
)

refund_desk_v1 = Agent(
    name="refund-desk",
    version="1",
    model=MODEL,
    instructions=V1_INSTRUCTIONS,
    tools=TOOLS,
    model_retry=RETRY,
    max_steps=8,
    llm=LLM,
)

refund_desk_v2 = Agent(
    name="refund-desk",
    version="2",
    model=MODEL,
    instructions=V1_INSTRUCTIONS
    + " Check the earlier refunds of the order with lookup_refunds before refunding, and say "
    "in the final answer what is left to refund.",
    tools=TOOLS,
    model_retry=RETRY,
    max_steps=8,
    llm=LLM,
)

"""A tool's presentation (formats, context, subject, high risk) is display only."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from runtime import Agent, AgentDefinitionError, Money, Presentation, ToolContext, tool


class Refund(BaseModel):
    order: str
    amount_cents: int


class Receipt(BaseModel):
    receipt_id: str


def _agent(presentation: Presentation | None) -> Agent:
    @tool(name="refund", requires_approval=True, presentation=presentation)
    def refund(args: Refund, ctx: ToolContext) -> Receipt:
        """Refund an order."""
        return Receipt(receipt_id="r1")

    return Agent(name="desk", version="1", model="m", instructions="i", tools=[refund])


def test_it_keeps_the_presentation_out_of_the_fingerprint():
    plain = _agent(None)
    presented = _agent(
        Presentation(
            formats={"amount_cents": Money("EUR")},
            context=lambda args: {"Order": args.order},
            subject=lambda args: f"order {args.order}",
            high_risk=lambda args: args.amount_cents > 10_000,
        )
    )
    assert presented.fingerprint == plain.fingerprint
    tool_ = presented.tools[0]
    assert tool_.presentation.subject is not None
    assert tool_.presentation.subject(Refund(order="7", amount_cents=1)) == "order 7"
    assert plain.tools[0].presentation == Presentation()


@pytest.mark.parametrize(
    ("currency", "exponent", "message"),
    [("usd", 2, "ISO 4217"), ("DOLLARS", 2, "ISO 4217"), ("USD", 9, "exponent must be 0 to 4")],
)
def test_it_refuses_a_malformed_money_format(currency, exponent, message):
    with pytest.raises(AgentDefinitionError, match=message):
        Money(currency, exponent)

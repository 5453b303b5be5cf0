"""The agent of the load benchmark (bench/load.py): every run looks an order up, then asks an
operator to approve a refund, then answers. A scripted model does no work, so what is measured
is the console and the runtime around it, not a provider.

Loaded by the server, the Celery workers and the submitter (AGENTOPS_AGENT_MODULES).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from runtime import Agent, ToolContext, tool
from runtime.llm import ModelRequest, ModelResponse
from runtime.llm.scripted import call, say

MESSAGE = "Order A-1001 arrived broken: please refund it."


class OrderQuery(BaseModel):
    order_id: str


class Order(BaseModel):
    order_id: str
    status: str
    amount_cents: int


class Refund(BaseModel):
    order_id: str
    amount_cents: int


class Receipt(BaseModel):
    refund_id: str


@tool(recovery="safe")
def get_order(args: OrderQuery, ctx: ToolContext) -> Order:
    """Look an order up (no work: a constant)."""
    return Order(order_id=args.order_id, status="paid", amount_cents=1250)


@tool(recovery="idempotent", requires_approval=True)
def refund_order(args: Refund, ctx: ToolContext) -> Receipt:
    """Refund an order, once an operator approved it (no work: the operation id is the key)."""
    return Receipt(refund_id=f"re_{ctx.operation_id[:12]}")


RESPONSES = [
    call(("get_order", {"order_id": "A-1001"}), text="Checking the order.", step=1),
    call(("refund_order", {"order_id": "A-1001", "amount_cents": 1250}), step=2),
    say("Refunded order A-1001."),
]


class LoadModel:
    """The n-th answer of a transcript is response n."""

    def complete(self, request: ModelRequest, *, operation_id: str) -> ModelResponse:
        return self.answer(request.messages)

    def answer(self, messages: list[dict[str, Any]]) -> ModelResponse:
        return RESPONSES[sum(1 for message in messages if message["role"] == "assistant")]


load_agent = Agent(
    name="refunds",
    version="1",
    model="load-model",
    instructions="Refund broken orders, with an operator's approval.",
    tools=[get_order, refund_order],
    max_steps=len(RESPONSES),
    llm=LoadModel(),
)

"""The scripted agent every benchmark runs: 10 steps of one model request and two tool calls.

The model and the tools do no work: the model answers from prebuilt responses and the tools
return constants, so what is measured is the cost of the loop and of its durability. After the
10 steps the model gives its final answer, so a run makes 31 calls (11 model requests, 20 tool
calls); an intent-and-outcome log writes 62 records for it.

Imported inside a configured Django process (`runtime` loads the models), by every variant, so
the plain loop, our runtime and the peers call exactly the same model and tools.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from runtime import Agent, ToolContext, tool
from runtime.llm import ModelRequest, ModelResponse
from runtime.llm.scripted import call, say
from runtime.transcript import tool_result_block

STEPS = 10
TOOLS_PER_STEP = 2
MODEL_CALLS = STEPS + 1  # the final answer is one more model request
CALLS = MODEL_CALLS + STEPS * TOOLS_PER_STEP
MESSAGE = "Where is order A-1001, and who placed it?"
ANSWER = "Order A-1001 was paid by Ada Lovelace."


class OrderQuery(BaseModel):
    order_id: str


class Order(BaseModel):
    order_id: str
    status: str
    amount_cents: int


class Customer(BaseModel):
    order_id: str
    name: str
    email: str


@tool(recovery="safe")
def get_order(args: OrderQuery, ctx: ToolContext) -> Order:
    """Look an order up (no work: a constant)."""
    return Order(order_id=args.order_id, status="paid", amount_cents=1250)


@tool(recovery="idempotent")
def get_customer(args: OrderQuery, ctx: ToolContext) -> Customer:
    """Look the order's customer up (no work: a constant)."""
    return Customer(order_id=args.order_id, name="Ada Lovelace", email="ada@example.com")


def _responses() -> list[ModelResponse]:
    steps = [
        call(
            ("get_order", {"order_id": f"A-{1000 + step}"}),
            ("get_customer", {"order_id": f"A-{1000 + step}"}),
            text=f"Checking order A-{1000 + step}.",
            step=step,
        )
        for step in range(1, STEPS + 1)
    ]
    return [*steps, say(ANSWER)]


class BenchModel:
    """A model that does no work: the n-th answer of a transcript is prebuilt response n.

    The response objects are shared, never copied: every caller only reads them.
    """

    def __init__(self) -> None:
        self.responses = _responses()

    def complete(self, request: ModelRequest, *, operation_id: str) -> ModelResponse:
        return self.answer(request.messages)

    def answer(self, messages: list[dict[str, Any]]) -> ModelResponse:
        position = sum(1 for message in messages if message["role"] == "assistant")
        return self.responses[position]


MODEL = BenchModel()

bench_agent = Agent(
    name="bench",
    version="1",
    model="bench-model",
    instructions="Answer questions about orders. Use the tools.",
    tools=[get_order, get_customer],
    max_steps=MODEL_CALLS,
    llm=MODEL,
)


# --- the plain loop and the steps the peers make durable ------------------------------------------

TOOL_SPECS = [t.model_spec() for t in bench_agent.tools]
TOOLS = {t.name: t for t in bench_agent.tools}


def model_request(messages: list[dict[str, Any]]) -> ModelRequest:
    return ModelRequest(
        model=bench_agent.model,
        system=bench_agent.instructions,
        messages=messages,
        tools=TOOL_SPECS,
        max_tokens=bench_agent.max_tokens,
    )


def model_step(messages: list[dict[str, Any]], operation_id: str) -> dict[str, Any]:
    """One model request; the response as JSON (what a durable step stores and replays)."""
    response = MODEL.complete(model_request(messages), operation_id=operation_id)
    return response.model_dump(mode="json")


def tool_step(use: dict[str, Any], operation_id: str) -> dict[str, Any]:
    """One tool call from a `tool_use` block: validated input, the handler, validated output."""
    chosen = TOOLS[use["name"]]
    assert chosen.handler is not None
    args = chosen.input_model.model_validate(use["input"])
    context = ToolContext(run_id="", operation_key=use["id"], operation_id=operation_id, attempt=1)
    return tool_result_block(
        use["id"], chosen.validate_output(chosen.handler(args, context)), False
    )


Hook = Callable[[str], None]


def plain_loop(run_id: str, on_intent: Hook | None = None, on_outcome: Hook | None = None) -> str:
    """The agent loop with no durability; the hooks, if given, run before and after each call.

    The lower-bound variants pass hooks that commit one bare record each: the same loop with
    the thinnest possible intent-and-outcome log.
    """
    messages: list[dict[str, Any]] = [{"role": "user", "content": MESSAGE}]
    for step in range(1, MODEL_CALLS + 1):
        key = f"step-{step}/model"
        if on_intent:
            on_intent(key)
        response = model_step(messages, f"{run_id}:{key}")
        if on_outcome:
            on_outcome(key)
        content = response["content"]
        messages.append({"role": "assistant", "content": content})
        uses = [block for block in content if block["type"] == "tool_use"]
        if not uses:
            return "".join(block["text"] for block in content if block["type"] == "text")
        results = []
        for use in uses:
            key = f"step-{step}/tool/{use['id']}"
            if on_intent:
                on_intent(key)
            results.append(tool_step(use, f"{run_id}:{key}"))
            if on_outcome:
                on_outcome(key)
        messages.append({"role": "user", "content": results})
    raise AssertionError("the script always ends with a final answer")

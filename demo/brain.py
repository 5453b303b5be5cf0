"""A deterministic stand-in for Claude that plays the refund desk from the transcript alone.

It reads the customer's message and the tool results so far, and answers the way the real
agent would: look the order up, ask for what is missing, ask to refund, open a ticket, sum up.
Markers in a message exercise the unhappy paths: "(provider outage)" makes the first request of
the run fail in each process (so a restarted worker meets the outage once more before it
clears), "(loop)" never gives a final answer.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from runtime.errors import ModelError
from runtime.llm import ContentBlock, ModelRequest, ModelResponse, TextBlock, ToolUseBlock

_ORDER = re.compile(r"\b(\d{4,6})\b")
_WANTS_REFUND = re.compile(r"refund|money back", re.IGNORECASE)
_AMOUNT = re.compile(r"\$\s?(\d+(?:\.\d{1,2})?)")


def _cents(text: str) -> int | None:
    match = _AMOUNT.search(text)
    return round(float(match.group(1)) * 100) if match else None


def _dollars(cents: int) -> str:
    return f"${cents / 100:,.2f}"


@dataclass
class _Turn:
    """This run's part of the transcript: the customer's message and the results so far."""

    message: str
    position: int
    results: dict[str, list[tuple[dict[str, Any], bool]]] = field(default_factory=dict)
    answers: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, messages: list[dict[str, Any]]) -> _Turn:
        start = max(
            i
            for i, m in enumerate(messages)
            if m["role"] == "user" and isinstance(m["content"], str)
        )
        turn = cls(message=messages[start]["content"], position=0)
        names: dict[str, str] = {}
        for message in messages[start + 1 :]:
            if message["role"] == "assistant":
                turn.position += 1
                names |= {b["id"]: b["name"] for b in message["content"] if b["type"] == "tool_use"}
                continue
            for block in message["content"]:
                result = json.loads(block["content"])
                name = names.get(block["tool_use_id"], "?")
                turn.results.setdefault(name, []).append((result, block["is_error"]))
                if name == "ask_operator" and not block["is_error"]:
                    turn.answers.append(result["answer"])
        return turn

    def last(self, tool: str) -> tuple[dict[str, Any], bool] | None:
        return self.results[tool][-1] if tool in self.results else None

    @property
    def said(self) -> str:
        return " ".join([self.message, *self.answers])


class RefundDeskBrain:
    """The scripted model of the demo (see the module docstring)."""

    def __init__(self, outages: Counter[str]) -> None:
        self._outages = outages

    def complete(self, request: ModelRequest, *, operation_id: str) -> ModelResponse:
        turn = _Turn.read(request.messages)
        run_id = operation_id.partition(":")[0]
        if "(provider outage)" in turn.message and self._outages[run_id] < 1:
            self._outages[run_id] += 1
            raise ModelError(
                "HTTP 529 overloaded_error: the model provider is overloaded",
                transient=True,
                status=529,
                reason="overloaded",
            )
        response = self._next(turn)
        response.model = request.model
        response.usage.input_tokens = len(json.dumps(request.messages)) // 4
        response.usage.output_tokens = len(response.model_dump_json()) // 4
        return response

    def _call(
        self, turn: _Turn, *calls: tuple[str, dict[str, Any]], text: str = ""
    ) -> ModelResponse:
        blocks: list[ContentBlock] = [TextBlock(text=text)] if text else []
        blocks += [
            ToolUseBlock(id=f"toolu_{turn.position:02d}_{i}", name=name, input=args)
            for i, (name, args) in enumerate(calls)
        ]
        return ModelResponse(content=blocks, stop_reason="tool_use")

    def _say(self, text: str) -> ModelResponse:
        return ModelResponse(content=[TextBlock(text=text)], stop_reason="end_turn")

    def _next(self, turn: _Turn) -> ModelResponse:
        found = _ORDER.search(turn.said)
        if found is None:
            if "ask_operator" in turn.results:
                return self._say("I could not find an order number, so I cannot help yet.")
            return self._call(
                turn,
                ("ask_operator", {"question": "Which order number is this about?"}),
                text="The customer did not give an order number.",
            )
        number = found.group(1)
        if "(loop)" in turn.message or "get_order" not in turn.results:
            return self._call(
                turn,
                ("get_order", {"order_number": number}),
                ("lookup_refunds", {"order_number": number}),
                text=f"Let me look order {number} up.",
            )
        order, failed = turn.last("get_order") or ({}, True)
        if failed:
            return self._say(
                f"I could not find order {number}: {order.get('error', 'unknown error')}."
            )
        wants_refund = _WANTS_REFUND.search(turn.message) is not None
        if not wants_refund:
            return self._say(
                f"Order {number} ({order['item']}) is {order['status']}; "
                f"{_dollars(order['refunded_cents'])} of {_dollars(order['total_cents'])} "
                "was refunded."
            )
        amount = _cents(turn.said)
        if amount is None:
            if len(turn.answers) < 2:
                left = order["total_cents"] - order["refunded_cents"]
                return self._call(
                    turn,
                    (
                        "ask_operator",
                        {
                            "question": f"How much of order {number} should I refund? "
                            f"Up to {_dollars(left)} is refundable."
                        },
                    ),
                )
            return self._say("I did not get an amount, so I did not refund anything.")
        refund = turn.last("refund_order")
        if refund is None:
            reason = turn.message[:200]
            return self._call(
                turn,
                (
                    "refund_order",
                    {"order_number": number, "amount_cents": amount, "reason": reason},
                ),
                text=f"I will refund {_dollars(amount)} of order {number} ({order['item']}).",
            )
        result, failed = refund
        # An operator may edit the arguments before approving: the result then says which
        # fields changed, around the tool's own result.
        edited = sorted(result.get("operator_edited_arguments", {})) if not failed else []
        if edited:
            result = result["result"]
        if failed:
            why = result.get("reason") or result.get("error") or "the refund failed"
            return self._say(f"I did not refund order {number}: {why}")
        if "ticket" in turn.message.lower() and "create_ticket" not in turn.results:
            return self._call(
                turn,
                (
                    "create_ticket",
                    {
                        "order_number": number,
                        "subject": f"Refund on order {number}",
                        "body": f"Refunded {_dollars(amount)}, receipt {result['receipt_id']}.",
                    },
                ),
            )
        ticket = turn.last("create_ticket")
        follow_up = f" Ticket {ticket[0]['ticket_id']} is open." if ticket and not ticket[1] else ""
        changed = f" An operator changed {', '.join(edited)} before approving." if edited else ""
        return self._say(
            f"Refunded {_dollars(result['amount_cents'])} of order {number}, "
            f"receipt {result['receipt_id']}.{changed}{follow_up}"
        )

"""Golden logs: committed histories replayed through today's engine.

A log recorded by an earlier build must replay to the same answer without calling the model or
any tool. If a change to key derivation, input hashing or the transcript breaks this, runs in
flight during a deploy would block or, worse, diverge. Regenerate only on purpose:
AGENTOPS_WRITE_GOLDEN=1 pytest tests/runtime/test_golden_logs.py
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from django.utils import timezone

from demo import agents
from demo.brain import RefundDeskBrain
from demo.models import Customer, Order
from runtime import register, respond, submit
from runtime.llm import ModelRequest, ModelResponse
from runtime.models import Operation, Run, RunStatus
from runtime.testing import run_until_idle

GOLDEN = Path(__file__).parent / "golden" / "refund_desk_v1.json"
FIELDS = ("key", "kind", "name", "policy", "status", "input", "input_hash", "result", "is_error")


class NoCalls:
    def complete(self, request: ModelRequest, *, operation_id: str) -> ModelResponse:
        raise AssertionError(f"replay called the model for {operation_id}")


@pytest.fixture
def orders(db):
    customer = Customer.objects.create(name="Ada", email="ada@example.com")
    Order.objects.create(
        number="1001", customer=customer, item="Mixer", total_cents=5000, placed_at=timezone.now()
    )


def record(define) -> dict:
    desk = define(replace(agents.refund_desk_v1, llm=RefundDeskBrain(outages=Counter())))
    run = run_until_idle(submit(desk.name, "Refund $20 of order 1001, open a ticket", actor="a").pk)
    respond(run.interactions.get().pk, {"approved": True}, actor="dana")
    run = run_until_idle(run.pk)
    ops = Operation.objects.filter(run=run).order_by("intent_at", "pk")
    return {
        "input": run.input,
        "output": run.output,
        "interactions": list(
            run.interactions.values("operation_key", "kind", "tool_name", "payload", "response")
        ),
        "operations": [{f: getattr(op, f) for f in FIELDS} for op in ops],
    }


def test_a_recorded_log_replays_to_the_same_answer_without_calls(define, orders):
    if os.environ.get("AGENTOPS_WRITE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(record(define), indent=1, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())
    # No model and no tool handlers: a call would fail the replay loudly.
    tools = [replace(t, handler=None) for t in agents.refund_desk_v1.tools]
    desk = define(replace(agents.refund_desk_v1, llm=NoCalls(), tools=tools), register_them=False)
    if not Run.objects.exists():
        register([desk], actor="admin")
    run = submit(desk.name, golden["input"], actor="a")
    now = timezone.now()
    for recorded in golden["interactions"]:
        run.interactions.create(
            created_at=now, status="answered", responded_by="dana", responded_at=now, **recorded
        )
    Operation.objects.bulk_create(
        Operation(run=run, intent_at=now, outcome_at=now, **op) for op in golden["operations"]
    )
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED, run.attention_detail or run.error
    assert run.output == golden["output"]
    assert Operation.objects.filter(run=run).count() == len(golden["operations"])

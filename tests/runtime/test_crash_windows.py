"""Every crash window by every recovery policy, counted on a fake external service."""

from __future__ import annotations

import json

import pytest

from runtime import submit
from runtime.models import EventKind, Operation, OperationStatus, RunStatus
from runtime.testing import SimulatedCrash, crash_at, recover
from tests.conftest import make_agent, one_call

KEY = "step-1/tool/toolu_01_0"
POLICY_TOOLS = {
    "manual": "charge",
    "safe": "get_order",
    "idempotent": "open_ticket",
    "report": "notify",
}
# The handler's effect happened before the crash in these windows.
EFFECT_LANDED = {"in_handler", "after_handler", "during_outcome"}


def crash_then_recover(define, tool_name: str, window: str):
    agent = define(make_agent(one_call(tool_name)))
    run = submit(agent.name, "please", actor="alice")
    with crash_at(window, tool=tool_name) as crashed, pytest.raises(SimulatedCrash):
        recover(run.pk)
    assert crashed == [KEY]
    return recover(run.pk)


@pytest.mark.parametrize("policy", POLICY_TOOLS)
def test_it_runs_normally_after_a_crash_before_the_intent(define, effects, policy):
    run = crash_then_recover(define, POLICY_TOOLS[policy], "before_intent")
    assert run.status == RunStatus.COMPLETED
    assert effects.total == 1
    assert Operation.objects.get(run=run, key=KEY).attempts == 1


@pytest.mark.parametrize(
    "window", ["after_intent", "in_handler", "after_handler", "during_outcome"]
)
def test_it_blocks_a_manual_call_with_an_unknown_outcome(define, effects, window):
    run = crash_then_recover(define, "charge", window)
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert run.attention_reason == "uncertain_operation"
    assert run.blocked_operation == KEY
    assert run.attention_detail["operation_id"] == f"{run.pk}:{KEY}"
    assert effects.total == (1 if window in EFFECT_LANDED else 0)
    assert max(effects.effects.values(), default=0) <= 1
    assert Operation.objects.get(run=run, key=KEY).status == OperationStatus.STARTED
    assert run.events.filter(kind=EventKind.BLOCKED, operation_key=KEY).count() == 1


@pytest.mark.parametrize(
    "window", ["after_intent", "in_handler", "after_handler", "during_outcome"]
)
def test_it_runs_a_safe_call_again(define, effects, window):
    run = crash_then_recover(define, "get_order", window)
    assert run.status == RunStatus.COMPLETED
    op = Operation.objects.get(run=run, key=KEY)
    assert op.attempts == 2
    assert effects.total == (2 if window in EFFECT_LANDED else 1)


@pytest.mark.parametrize(
    "window", ["after_intent", "in_handler", "after_handler", "during_outcome"]
)
def test_it_runs_an_idempotent_call_again_with_the_same_operation_id(define, effects, window):
    run = crash_then_recover(define, "open_ticket", window)
    assert run.status == RunStatus.COMPLETED
    operation_id = f"{run.pk}:{KEY}"
    assert effects.calls[operation_id] == (2 if window in EFFECT_LANDED else 1)
    assert effects.effects == {operation_id: 1}


@pytest.mark.parametrize(
    "window", ["after_intent", "in_handler", "after_handler", "during_outcome"]
)
def test_it_reports_a_possibly_run_call_to_the_model(define, effects, window):
    run = crash_then_recover(define, "notify", window)
    assert run.status == RunStatus.COMPLETED
    assert effects.total == (1 if window in EFFECT_LANDED else 0)
    op = Operation.objects.get(run=run, key=KEY)
    assert op.is_error
    assert op.result["kind"] == "tool-durability-error"
    assert op.result["toolName"] == "notify"
    assert op.result["toolCallId"] == "toolu_01_0"
    # The model's next request carried the error as the tool's result.
    results = [
        block
        for message in run.transcript
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
    ]
    assert [json.loads(b["content"])["kind"] for b in results] == ["tool-durability-error"]


@pytest.mark.parametrize("policy", POLICY_TOOLS)
def test_it_never_reruns_a_committed_outcome(define, effects, policy):
    run = crash_then_recover(define, POLICY_TOOLS[policy], "after_outcome")
    assert run.status == RunStatus.COMPLETED
    assert effects.total == 1
    assert sum(effects.calls.values()) == 1
    assert Operation.objects.get(run=run, key=KEY).attempts == 1


def test_it_reruns_an_interrupted_model_request_and_counts_the_attempt(define, effects):
    agent = define(make_agent(one_call("get_order")))
    run = submit(agent.name, "please", actor="alice")
    with crash_at("after_intent", tool="model"), pytest.raises(SimulatedCrash):
        recover(run.pk)
    run = recover(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert Operation.objects.get(run=run, key="step-1/model").attempts == 2
    assert agent.llm.calls == 2  # one request per step, the first one twice


def test_it_keeps_the_outcome_write_atomic(define, effects):
    agent = define(make_agent(one_call("charge")))
    run = submit(agent.name, "please", actor="alice")
    with crash_at("during_outcome", tool="charge"), pytest.raises(SimulatedCrash):
        recover(run.pk)
    op = Operation.objects.get(run=run, key=KEY)
    assert op.status == OperationStatus.STARTED
    assert op.result is None
    assert not run.events.filter(kind=EventKind.OUTCOME, operation_key=KEY).exists()

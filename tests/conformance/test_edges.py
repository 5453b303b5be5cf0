"""One test per CONFORMANCE rule of the runtime's edges, named after its id, on both databases.

The detailed tests live beside the code they cover (tests/runtime, tests/reliability); each test
here states its rule in one end-to-end run.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from pydantic import BaseModel

from runtime import (
    Agent,
    Cancelled,
    ModelError,
    ModelRetry,
    ToolContext,
    ToolDurabilityError,
    cancel,
    faults,
    retry,
    submit,
    tool,
)
from runtime.clock import frozen
from runtime.jsonvalues import normalized
from runtime.llm import ThinkingBlock
from runtime.models import AttentionReason, ErrorKind, Operation, OperationStatus, Run, RunStatus
from runtime.testing import SimulatedCrash, crash_at, fixed_jitter, recover, run_until_idle
from tests.conftest import Amount, Receipt
from tests.runtime.edge_support import (
    Recorder,
    assert_valid_messages,
    edge_agent,
    reply,
    text,
    use,
)

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_c11_tool_durability_error_is_a_type_exported_by_the_runtime(define, effects):
    agent = define(edge_agent(Recorder(reply(use("notify"), stop="tool_use"), reply(text("ok")))))
    run = submit(agent.name, "notify", actor="alice")
    with crash_at("in_handler", tool="notify"), pytest.raises(SimulatedCrash):
        run_until_idle(run.pk)
    result = Operation.objects.get(run=recover(run.pk), kind="tool").result
    assert isinstance(ToolDurabilityError.from_result(result), ToolDurabilityError)
    assert ToolDurabilityError("notify", "toolu_1").to_result() == result


@pytest.mark.parametrize("target", ["model", "get_order"])
def test_c12_the_harness_targets_during_outcome_of_model_requests_and_tools(define, target):
    llm = Recorder(reply(use("get_order"), stop="tool_use"), reply(text("ok")))
    agent = define(edge_agent(llm))
    run = submit(agent.name, "go", actor="alice")
    with crash_at("during_outcome", tool=target) as crashed, pytest.raises(SimulatedCrash):
        run_until_idle(run.pk)
    key = "step-1/model" if target == "model" else "step-1/tool/toolu_1"
    assert crashed == [key]
    assert Operation.objects.get(run=run, key=key).status == OperationStatus.STARTED


def _raises(args: Amount) -> bool:
    raise RuntimeError("rule engine down")


@tool(recovery="manual", requires_approval=_raises)
def ruled(args: Amount, ctx: ToolContext) -> Receipt:
    """A call behind a rule that raises."""
    return Receipt(receipt_id="r")


def test_c13_claims_that_keep_crashing_end_in_needs_attention(define):
    llm = Recorder(reply(use("ruled", args={"order_id": "A1", "amount_cents": 1}), stop="tool_use"))
    agent = define(
        Agent(name="ruled", version="1", model="m", instructions="", tools=[ruled], llm=llm)
    )
    run = run_until_idle(submit(agent.name, "go", actor="alice").pk)
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert run.attention_reason == AttentionReason.CRASH_LOOP
    assert run.last_crash == "RuntimeError: rule engine down"


def test_c14_an_operation_rerun_after_crashes_has_an_attempt_budget(define, effects, settings):
    settings.AGENTOPS_CRASH_LOOP_CLAIMS = 20
    agent = define(edge_agent(Recorder(reply(use("get_order"), stop="tool_use"))))
    run = submit(agent.name, "go", actor="alice")
    for _ in range(3):
        with crash_at("after_handler", tool="get_order"), pytest.raises(SimulatedCrash):
            recover(run.pk)
    run = recover(run.pk)
    assert run.attention_reason == AttentionReason.ATTEMPTS_EXHAUSTED
    assert run.attention_detail["name"] == "get_order"
    assert effects.total == 3


def test_s1_max_tokens_never_completes_and_its_tool_calls_never_run(define, effects):
    llm = Recorder(reply(text("Refunding"), use("charge"), stop="max_tokens"))
    agent = define(edge_agent(llm))
    run = run_until_idle(submit(agent.name, "go", actor="alice").pk)
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert run.attention_detail["stop_reason"] == "max_tokens"
    assert effects.total == 0


def test_s2_pause_turn_continues_and_refusal_stops_retryably(define):
    llm = Recorder(
        reply(text("Working"), stop="pause_turn"),
        reply(text("No."), stop="refusal"),
        reply(text("Yes.")),
    )
    agent = define(edge_agent(llm))
    run = run_until_idle(submit(agent.name, "go", actor="alice").pk)
    assert run.attention_reason == AttentionReason.MODEL_STOPPED
    assert run.attention_detail["stop_reason"] == "refusal"
    assert llm.requests[1].messages[-1]["role"] == "assistant"  # the paused turn went back
    retry(run.pk, actor="ops")
    assert run_until_idle(run.pk).status == RunStatus.COMPLETED


def test_s3_empty_assistant_content_is_never_stored_nor_sent(define, effects):
    llm = Recorder(
        reply(use("get_order"), stop="tool_use"),
        reply(),
        reply(),
        reply(text("Paid.")),
    )
    agent = define(edge_agent(llm))
    first = run_until_idle(submit(agent.name, "A1?", actor="alice").pk)
    run_until_idle(submit(agent.name, "and?", actor="alice", session=first.session_id).pk)
    for request in llm.requests:
        assert_valid_messages(request.messages)
    assert all(message["content"] for message in first.transcript)


def test_s4_a_later_run_sees_the_calls_of_a_failed_run(define, effects):
    llm = Recorder(reply(use("charge"), stop="tool_use"), reply(text("Yes, once.")))
    agent = define(edge_agent(llm, max_steps=1))
    first = run_until_idle(submit(agent.name, "charge A1", actor="alice").pk)
    assert first.status == RunStatus.FAILED
    run_until_idle(submit(agent.name, "charged?", actor="alice", session=first.session_id).pk)
    sent = llm.requests[1].messages
    assert_valid_messages(sent)
    assert sent[1]["content"][0]["name"] == "charge"
    assert json.loads(sent[2]["content"][0]["content"]) == {"receipt_id": "rcpt-1"}


def test_s6_thinking_blocks_are_sent_back_unchanged(define, effects):
    thought = ThinkingBlock(thinking="Check the order.", signature="sig-123")
    llm = Recorder(reply(thought, use("get_order"), stop="tool_use"), reply(text("Paid.")))
    agent = define(edge_agent(llm, max_tokens=2048, thinking_budget=1024))
    run_until_idle(submit(agent.name, "A1?", actor="alice").pk)
    assert llm.requests[1].messages[1]["content"][0] == thought.model_dump()


class Reading(BaseModel):
    value: float


@tool(recovery="safe")
def sensor(args: Amount, ctx: ToolContext) -> Reading:
    """A reading jsonb rewrites (1e20 comes back as an integer)."""
    return Reading(value=1e20)


def test_v4_a_replayed_input_compares_exactly_on_both_databases(define):
    llm = Recorder(
        reply(use("sensor", args={"order_id": "A1", "amount_cents": 1}), stop="tool_use"),
        reply(text("read")),
    )
    agent = define(
        Agent(name="sensor", version="1", model="m", instructions="", tools=[sensor], llm=llm)
    )
    run = submit(agent.name, "read", actor="alice")
    outcomes: list[str] = []

    def die_after_the_second_model_outcome(window, run_, key, name):
        if window == "after_outcome" and name == "model":
            outcomes.append(key)
            if len(outcomes) == 2:
                raise SimulatedCrash(key)

    # The first pass built step 2's request from the reading in memory; the replay rebuilds
    # it from the log, where jsonb keeps 1e20 as an integer.
    previous, faults.handler = faults.handler, die_after_the_second_model_outcome
    try:
        with pytest.raises(SimulatedCrash):
            run_until_idle(run.pk)
    finally:
        faults.handler = previous
    run = recover(run.pk)
    assert run.attention_reason == ""
    assert run.status == RunStatus.COMPLETED
    assert normalized({"value": 1e20}) == {"value": 10**20}


def test_t6_model_attempts_never_exceed_the_maximum_whatever_crashes_do(define):
    llm = Recorder(ModelError("overloaded", transient=True), ModelError("overloaded"))
    agent = define(edge_agent(llm, model_retry=ModelRetry(max_attempts=2, initial_delay=1)))
    with frozen(T0) as clock:
        run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
        clock.advance(1)
        with crash_at("after_outcome", tool="model"), pytest.raises(SimulatedCrash):
            run_until_idle(run.pk)
        run = recover(run.pk)
    assert run.status == RunStatus.FAILED
    assert llm.calls == 2


def test_t8_attempts_exhausted_fails_the_run_with_the_last_error(define):
    llm = Recorder(ModelError("first", transient=True), ModelError("second", status=400))
    agent = define(edge_agent(llm, model_retry=ModelRetry(max_attempts=2, initial_delay=1)))
    with frozen(T0) as clock:
        run_until_idle(submit(agent.name, "hi", actor="alice").pk)
        clock.advance(1)
        run = run_until_idle(Run.objects.get().pk)
    assert run.status == RunStatus.FAILED
    assert run.error.endswith("second")
    assert run.error_kind == ErrorKind.PERMANENT


def test_t9_persisted_backoff_has_full_jitter_and_honours_retry_after(define):
    llm = Recorder(ModelError("slow down", transient=True, retry_after=20), reply(text("hi")))
    agent = define(edge_agent(llm, model_retry=ModelRetry(max_attempts=3, initial_delay=60)))
    with frozen(T0), fixed_jitter(0.1):
        run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    # 10% of the 60 s ceiling is 6 s, below the provider's 20 s: 20 s it is.
    assert run.next_attempt_at == T0 + dt.timedelta(seconds=20)
    assert run.error_kind == ErrorKind.TRANSIENT


class Loop(BaseModel):
    rounds: int


class Rounds(BaseModel):
    rounds: int


@tool(recovery="safe")
def looping(args: Loop, ctx: ToolContext) -> Rounds:
    """Works in rounds; its run is cancelled during the second."""
    for round_ in range(args.rounds):
        if round_ == 1:
            cancel(ctx.run_id, actor="ops")
        ctx.raise_if_cancelled()
    return Rounds(rounds=args.rounds)


def test_e4_a_running_handler_can_see_that_its_run_was_cancelled(define):
    llm = Recorder(reply(use("looping", args={"rounds": 5}), stop="tool_use"))
    agent = define(
        Agent(name="loop", version="1", model="m", instructions="", tools=[looping], llm=llm)
    )
    run = run_until_idle(submit(agent.name, "go", actor="alice").pk)
    assert run.status == RunStatus.CANCELLED
    assert Operation.objects.get(run=run, kind="tool").status == OperationStatus.STARTED
    assert issubclass(Cancelled, BaseException)


def test_r4_an_operation_verified_not_run_runs_once_more_with_the_same_id(define, effects):
    agent = define(edge_agent(Recorder(reply(use("charge"), stop="tool_use"), reply(text("ok")))))
    run = submit(agent.name, "charge", actor="alice")
    # The model's answer commits with the charge's intent (E5's fold), so a crash after that
    # intent leaves the charge uncertain and the answer kept.
    with crash_at("after_intent", tool="charge"), pytest.raises(SimulatedCrash):
        run_until_idle(run.pk)
    assert recover(run.pk).attention_reason == AttentionReason.UNCERTAIN_OPERATION
    Operation.objects.filter(run=run, kind="tool").update(status=OperationStatus.NOT_RUN)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.QUEUED, blocked_operation="")
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert list(effects.effects.values()) == [1]
    assert list(effects.effects) == [f"{run.pk}:step-1/tool/toolu_1"]

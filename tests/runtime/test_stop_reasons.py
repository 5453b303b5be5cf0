"""Every stop reason handled on purpose (S1, S2) and no empty content stored or sent (S3)."""

from __future__ import annotations

import pytest

from runtime import ModelRetry, retry, submit
from runtime.errors import PromptTooLong
from runtime.models import AttentionReason, Operation, OperationStatus, RunStatus
from runtime.testing import SimulatedCrash, crash_at, recover, run_until_idle
from tests.runtime.edge_support import (
    Recorder,
    assert_valid_messages,
    edge_agent,
    reply,
    text,
    use,
)


def _stopped(run, reason: str) -> None:
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert run.attention_reason == AttentionReason.MODEL_STOPPED
    assert run.attention_detail["stop_reason"] == reason
    assert reason in run.attention_detail["message"]
    assert run.output == ""
    assert run.transcript == []


def test_s1_a_truncated_answer_never_completes_the_run(define):
    llm = Recorder(reply(text("The refund policy says you can"), stop="max_tokens"))
    agent = define(edge_agent(llm))
    run = run_until_idle(submit(agent.name, "policy?", actor="alice").pk)
    _stopped(run, "max_tokens")
    assert "cut off" in run.attention_detail["message"]
    op = Operation.objects.get(run=run, key="step-1/model")
    assert op.status == OperationStatus.FAILED
    # What came back is kept for the operator to read, with its token usage.
    assert op.result["response"]["content"][0]["text"] == "The refund policy says you can"


def test_s1_a_tool_call_from_a_truncated_response_never_runs(define, effects):
    llm = Recorder(reply(text("Charging"), use("charge"), stop="max_tokens"))
    agent = define(edge_agent(llm))
    run = run_until_idle(submit(agent.name, "charge A1", actor="alice").pk)
    _stopped(run, "max_tokens")
    assert effects.total == 0
    assert not Operation.objects.filter(run=run, kind="tool").exists()


def test_s1_retry_asks_the_model_again(define, effects):
    llm = Recorder(
        reply(text("Charging"), use("charge"), stop="max_tokens"),
        reply(use("charge"), stop="tool_use"),
        reply(text("Charged.")),
    )
    agent = define(edge_agent(llm))
    run = run_until_idle(submit(agent.name, "charge A1", actor="alice").pk)
    retry(run.pk, actor="ops")
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert run.output == "Charged."
    assert effects.total == 1
    assert llm.calls == 3
    # The truncated answer was never shown to the model again.
    assert "Charging" not in str(llm.requests[1].messages)


def test_s1_a_crash_between_the_stop_and_the_block_does_not_ask_again(define):
    llm = Recorder(reply(text("cut"), stop="max_tokens"))
    agent = define(edge_agent(llm))
    run = submit(agent.name, "hi", actor="alice")
    with crash_at("after_outcome", tool="model"), pytest.raises(SimulatedCrash):
        run_until_idle(run.pk)
    run = recover(run.pk)
    _stopped(run, "max_tokens")
    assert llm.calls == 1


@pytest.mark.parametrize("reason", ["refusal", "model_context_window_exceeded"])
def test_s2_refusal_and_context_overflow_end_the_turn_with_the_reason(define, reason):
    llm = Recorder(reply(text("I can't help with that."), stop=reason), reply(text("Sure.")))
    agent = define(edge_agent(llm))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    _stopped(run, reason)
    retry(run.pk, actor="ops")
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert run.output == "Sure."


def test_s2_pause_turn_continues_the_turn_with_the_paused_content(define, effects):
    llm = Recorder(
        reply(text("Searching the order history"), stop="pause_turn"),
        reply(use("get_order"), stop="tool_use"),
        reply(text("Order A1 is paid.")),
    )
    agent = define(edge_agent(llm))
    run = run_until_idle(submit(agent.name, "status of A1?", actor="alice").pk)
    assert run.status == RunStatus.COMPLETED
    assert run.output == "Order A1 is paid."
    assert effects.total == 1
    # The paused content went back as the last (assistant) message, as the API documents.
    continued = llm.requests[1].messages
    assert continued[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Searching the order history"}],
    }
    # And the continuation joined that same assistant turn: roles still alternate.
    assert_valid_messages(llm.requests[2].messages)
    assert [m["role"] for m in run.transcript] == ["user", "assistant", "user", "assistant"]


def test_s2_pause_turn_stays_within_the_step_budget(define):
    llm = Recorder(*[reply(text(f"part {i}"), stop="pause_turn") for i in range(5)])
    agent = define(edge_agent(llm, max_steps=3))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    assert run.status == RunStatus.FAILED
    assert "step budget" in run.error
    assert llm.calls == 3


def test_s2_prompt_too_long_stops_the_run_plainly_without_retrying(define):
    llm = Recorder(PromptTooLong("prompt is too long: 210000 tokens > 200000 maximum"))
    agent = define(edge_agent(llm, model_retry=ModelRetry(max_attempts=5)))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    _stopped(run, "prompt_too_long")
    assert "no longer fits the model's context window" in run.attention_detail["message"]
    assert llm.calls == 1  # waiting cannot make it fit: no retry timer


def test_s3_an_empty_answer_after_tool_results_is_never_stored_nor_sent(define, effects):
    llm = Recorder(
        reply(use("get_order"), stop="tool_use"),
        reply(stop="end_turn"),  # nothing to say after the tool result
        reply(text("Order A1 is paid.")),
    )
    agent = define(edge_agent(llm))
    run = run_until_idle(submit(agent.name, "status of A1?", actor="alice").pk)
    assert run.status == RunStatus.COMPLETED
    assert run.output == "Order A1 is paid."
    nudged = llm.requests[2].messages
    assert_valid_messages(nudged)
    # Asked to go on in the user's turn (the API's advice), after the tool result.
    assert nudged[-1]["content"][-1] == {"type": "text", "text": "Please continue."}
    assert nudged[-1]["content"][0]["type"] == "tool_result"
    assert_valid_messages(run.transcript)


def test_s3_an_answerless_end_completes_and_the_next_run_sends_nothing_empty(define, effects):
    llm = Recorder(
        reply(use("get_order"), stop="tool_use"),
        reply(text("  "), stop="end_turn"),
        reply(stop="end_turn"),
        reply(text("Yes, it is paid.")),
    )
    agent = define(edge_agent(llm))
    first = run_until_idle(submit(agent.name, "look A1 up", actor="alice").pk)
    assert first.status == RunStatus.COMPLETED
    assert first.output == ""
    assert all(m["content"] for m in first.transcript)
    assert first.transcript[-1]["role"] == "user"  # no empty assistant message was kept

    second = run_until_idle(
        submit(agent.name, "is it paid?", actor="alice", session=first.session_id).pk
    )
    assert second.status == RunStatus.COMPLETED
    sent = llm.requests[3].messages
    assert_valid_messages(sent)
    assert sent[-1]["content"][-1] == {"type": "text", "text": "is it paid?"}


def test_s3_blank_text_blocks_are_dropped_from_what_is_sent_back(define, effects):
    llm = Recorder(reply(text(""), use("get_order"), stop="tool_use"), reply(text("Paid.")))
    agent = define(edge_agent(llm))
    run = run_until_idle(submit(agent.name, "A1?", actor="alice").pk)
    assert run.status == RunStatus.COMPLETED
    assert_valid_messages(llm.requests[1].messages)
    assert llm.requests[1].messages[1]["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": {"order_id": "A1"}}
    ]

"""The scripted model reaches every edge a real model can, without HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.errors import ModelError, PromptTooLong
from runtime.llm import ModelRequest, RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolUseBlock
from runtime.llm.scripted import (
    ScriptedModel,
    call,
    context_full,
    fail,
    paused,
    redacted_thinking,
    refuse,
    respond,
    say,
    signature_of,
    thinking,
    too_long,
    truncated,
)


def ask(*assistant_turns: list[dict[str, Any]]) -> ModelRequest:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Hi"}]
    for content in assistant_turns:
        messages += [
            {"role": "assistant", "content": content},
            {"role": "user", "content": "Go on"},
        ]
    return ModelRequest(model="scripted", system="", messages=messages, tools=[], max_tokens=64)


@pytest.mark.parametrize(
    ("turn", "stop_reason", "content"),
    [
        (say("done"), "end_turn", [TextBlock(text="done")]),
        (respond(TextBlock(text="x"), stop_reason="stop_sequence"), "stop_sequence", None),
        (call(("get_order", {"id": "A1"}), step=2), "tool_use", None),
        (truncated("cut sho"), "max_tokens", [TextBlock(text="cut sho")]),
        (paused(), "pause_turn", []),
        (refuse("I can't help with that."), "refusal", None),
        (context_full("..."), "model_context_window_exceeded", None),
        (respond(), "end_turn", []),
    ],
    ids=[
        "end_turn",
        "stop_sequence",
        "tool_use",
        "max_tokens",
        "pause_turn",
        "refusal",
        "context_window",
        "empty",
    ],
)
def test_s2_a_script_produces_every_stop_reason(
    turn: Any, stop_reason: str, content: list[Any] | None
) -> None:
    response = ScriptedModel([turn]).complete(ask(), operation_id="op-1")

    assert response.stop_reason == stop_reason
    if content is not None:
        assert response.content == content


def test_s1_a_truncated_tool_call_keeps_its_max_tokens_stop_reason() -> None:
    turn = truncated("Refunding", ("refund_order", {"order_id": "A"}), step=3)

    response = ScriptedModel([turn]).complete(ask(), operation_id="op-1")

    assert response.stop_reason == "max_tokens"
    assert response.tool_uses == [
        ToolUseBlock(id="toolu_03_0", name="refund_order", input={"order_id": "A"})
    ]


def test_s6_thinking_blocks_carry_a_signature_a_test_can_check() -> None:
    turn = respond(thinking("Look it up."), redacted_thinking("opaque"), TextBlock(text="ok"))

    response = ScriptedModel([turn]).complete(ask(), operation_id="op-1")

    assert response.content[:2] == [
        ThinkingBlock(thinking="Look it up.", signature=signature_of("Look it up.")),
        RedactedThinkingBlock(data="opaque"),
    ]
    assert signature_of("Look it up.") != signature_of("Look it up!")


def test_t9_a_scripted_failure_keeps_transient_and_retry_after_on_every_attempt() -> None:
    model = ScriptedModel([fail("Rate limited", retry_after=30, status=429, reason="rate_limited")])

    raised = []
    for attempt in range(2):
        with pytest.raises(ModelError) as caught:
            model.complete(ask(), operation_id=f"op-{attempt}")
        raised.append(caught.value)

    first, second = raised
    assert first is not second
    for error in raised:
        assert (error.transient, error.retry_after, error.status, error.reason) == (
            True,
            30,
            429,
            "rate_limited",
        )
        assert error.message == "Rate limited"


def test_a_scripted_prompt_too_long_is_raised_as_such() -> None:
    with pytest.raises(PromptTooLong) as caught:
        ScriptedModel([too_long()]).complete(ask(), operation_id="op-1")

    assert (caught.value.transient, caught.value.reason) == (False, "prompt_too_long")


def test_any_other_exception_is_a_permanent_model_error() -> None:
    with pytest.raises(ModelError) as caught:
        ScriptedModel([RuntimeError("boom")]).complete(ask(), operation_id="op-1")

    assert caught.value.message == "boom"
    assert not caught.value.transient


def test_it_answers_by_position_and_records_what_was_sent() -> None:
    model = ScriptedModel([say("first"), say("second")])
    earlier = [{"type": "text", "text": "first"}]

    assert model.complete(ask(), operation_id="op-1").text == "first"
    assert model.complete(ask(earlier), operation_id="op-2").text == "second"
    assert model.complete(ask(earlier, earlier), operation_id="op-3").text == (
        "(the script has ended)"
    )
    assert model.calls == 3
    assert model.requests[1].messages[1] == {"role": "assistant", "content": earlier}


def test_a_turn_is_not_changed_by_being_answered() -> None:
    turn = respond(thinking("plan"), TextBlock(text="ok"))
    before = turn.model_dump()
    model = ScriptedModel([turn])

    model.complete(ask(), operation_id="op-1").content.clear()

    assert turn.model_dump() == before

"""A model that answers from a list and records what it was sent, and checks on what it was sent.

The list is consumed one answer per request actually made (a replayed request takes none), so a
test can script responses the scripted model cannot: any stop reason, empty content, thinking
blocks, any exception.
"""

from __future__ import annotations

import itertools
from typing import Any

from runtime import Agent, ModelRetry, ask_operator
from runtime.llm import (
    ModelRequest,
    ModelResponse,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)
from tests.conftest import ARGS, TOOLS

Block = TextBlock | ToolUseBlock | ThinkingBlock


def reply(*blocks: Block, stop: StopReason | None = "end_turn") -> ModelResponse:
    return ModelResponse(content=list(blocks), stop_reason=stop)


def text(value: str) -> TextBlock:
    return TextBlock(text=value)


def use(name: str, call_id: str = "toolu_1", args: dict[str, Any] | None = None) -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name=name, input=args if args is not None else ARGS[name])


class Recorder:
    """Answers the n-th request made with the n-th turn (an exception is raised)."""

    def __init__(self, *turns: ModelResponse | Exception) -> None:
        self.turns = list(turns)
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest, *, operation_id: str) -> ModelResponse:
        self.requests.append(request.model_copy(deep=True))
        position = len(self.requests) - 1
        turn = self.turns[position] if position < len(self.turns) else reply(text("(no more)"))
        if isinstance(turn, Exception):
            raise turn
        return turn.model_copy(deep=True)

    @property
    def calls(self) -> int:
        return len(self.requests)


def edge_agent(
    llm: Recorder,
    *,
    name: str = "edge",
    model_retry: ModelRetry | None = None,
    **settings: Any,
) -> Agent:
    return Agent(
        name=name,
        version="1",
        model="claude-test",
        instructions="Help the customer.",
        tools=[*TOOLS.values(), ask_operator],
        model_retry=model_retry,
        llm=llm,
        **settings,
    )


def assert_valid_messages(messages: list[dict[str, Any]]) -> None:
    """What the Messages API requires of a request's messages (S3, S4): it starts with the user,
    roles alternate, nothing is empty, and every tool_use is answered by a tool_result in the
    next message."""
    assert messages, "no messages"
    assert messages[0]["role"] == "user"
    for before, after in itertools.pairwise(messages):
        assert before["role"] != after["role"], f"two {after['role']} messages in a row"
    for index, message in enumerate(messages):
        content = message["content"]
        assert content, f"message {index} ({message['role']}) is empty"
        if isinstance(content, str):
            assert content.strip()
            continue
        for block in content:
            if block["type"] == "text":
                assert block["text"].strip(), f"message {index} has an empty text block"
        uses = [b["id"] for b in content if b["type"] == "tool_use"]
        if uses:
            assert index + 1 < len(messages), "the last message asks for tools"
            answered = [
                b["tool_use_id"]
                for b in messages[index + 1]["content"]
                if isinstance(b, dict) and b["type"] == "tool_result"
            ]
            assert answered[: len(uses)] == uses, f"tool calls {uses} answered by {answered}"

"""A deterministic model for tests and the demo: answers come from a script, not a network.

Scripts can produce everything a real model can: each stop reason, empty content, thinking
blocks with signatures, and failures (`fail` for a provider error, transient or not, with a
`retry_after`; `too_long` for a prompt over the context window), so engine tests reach every
edge without HTTP.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from runtime.errors import ModelError, PromptTooLong
from runtime.llm import (
    ContentBlock,
    ModelRequest,
    ModelResponse,
    RedactedThinkingBlock,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)

Turn = ModelResponse | Exception
Script = Callable[[ModelRequest], Turn]


def say(text: str) -> ModelResponse:
    """A final answer."""
    return ModelResponse(content=[TextBlock(text=text)], stop_reason="end_turn")


def call(*calls: tuple[str, dict[str, Any]], text: str = "", step: int = 0) -> ModelResponse:
    """A response asking for tool calls, with ids derived from the step for stable keys."""
    return ModelResponse(content=[*_text(text), *_tool_uses(calls, step)], stop_reason="tool_use")


def respond(*blocks: ContentBlock, stop_reason: StopReason = "end_turn") -> ModelResponse:
    """A response of exactly these blocks (none for empty content) and this stop reason."""
    return ModelResponse(content=list(blocks), stop_reason=stop_reason)


def truncated(text: str = "", *calls: tuple[str, dict[str, Any]], step: int = 0) -> ModelResponse:
    """A `max_tokens` response: text cut short, and tool calls the cut left unfinished."""
    return ModelResponse(content=[*_text(text), *_tool_uses(calls, step)], stop_reason="max_tokens")


def paused(text: str = "") -> ModelResponse:
    """A `pause_turn` response: the turn is to be continued by sending the content back."""
    return respond(*_text(text), stop_reason="pause_turn")


def refuse(text: str = "") -> ModelResponse:
    """A `refusal` response."""
    return respond(*_text(text), stop_reason="refusal")


def context_full(text: str = "") -> ModelResponse:
    """A `model_context_window_exceeded` response: the answer filled the context window."""
    return respond(*_text(text), stop_reason="model_context_window_exceeded")


def thinking(text: str) -> ThinkingBlock:
    """A thinking block with a deterministic signature (`signature_of`), as the API signs one."""
    return ThinkingBlock(thinking=text, signature=signature_of(text))


def redacted_thinking(data: str) -> RedactedThinkingBlock:
    """A redacted thinking block carrying `data` as its opaque payload."""
    return RedactedThinkingBlock(data=data)


def signature_of(text: str) -> str:
    """The signature `thinking` gives `text`: lets a test check a block came back unchanged."""
    return "sig-" + hashlib.sha256(text.encode()).hexdigest()[:32]


def fail(
    message: str = "Overloaded",
    *,
    transient: bool = True,
    retry_after: float | None = None,
    status: int | None = 529,
    reason: str = "overloaded",
) -> ModelError:
    """A provider failure to put in a script; by default a transient 529 overload."""
    return ModelError(
        message, transient=transient, retry_after=retry_after, status=status, reason=reason
    )


def too_long(message: str = "prompt is too long: 210000 tokens > 200000 maximum") -> PromptTooLong:
    """The provider's refusal of a prompt over the model's context window."""
    return PromptTooLong(message)


def assistant_turns(request: ModelRequest) -> int:
    """How many times the model has answered in this transcript (the script's position)."""
    return sum(1 for message in request.messages if message["role"] == "assistant")


class ScriptedModel:
    """Answers from `turns` (the n-th answer for the n-th assistant turn) or a callable.

    A turn that is a `ModelError` (see `fail`, `too_long`) is raised as it is, a fresh copy each
    time; any other exception is raised as a permanent `ModelError`. Usage is reported as the
    size of the request and answer in characters, so it is deterministic; a turn's cache counts
    are kept. Every request is kept in `requests`, so a test can check what was sent.
    """

    def __init__(self, turns: Sequence[Turn] | Script) -> None:
        self._script: Script = turns if callable(turns) else self._from_list(list(turns))
        self.calls = 0
        self.requests: list[ModelRequest] = []

    @staticmethod
    def _from_list(turns: list[Turn]) -> Script:
        def script(request: ModelRequest) -> Turn:
            position = assistant_turns(request)
            if position >= len(turns):
                return say("(the script has ended)")
            return turns[position]

        return script

    def complete(self, request: ModelRequest, *, operation_id: str) -> ModelResponse:
        self.calls += 1
        self.requests.append(request.model_copy(deep=True))
        turn = self._script(request)
        if isinstance(turn, ModelError):
            # A copy, so a script that fails the same way on every attempt raises clean errors.
            raise copy.copy(turn)
        if isinstance(turn, Exception):
            raise ModelError(str(turn)) from turn
        response = turn.model_copy(deep=True)
        response.model = request.model
        response.usage.input_tokens = len(str(request.messages))
        response.usage.output_tokens = len(response.model_dump_json())
        return response


def _text(text: str) -> list[ContentBlock]:
    return [TextBlock(text=text)] if text else []


def _tool_uses(calls: Sequence[tuple[str, dict[str, Any]]], step: int) -> list[ContentBlock]:
    return [
        ToolUseBlock(id=f"toolu_{step:02d}_{i}", name=name, input=args)
        for i, (name, args) in enumerate(calls)
    ]

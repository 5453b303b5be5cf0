"""A deterministic model for tests and the demo: answers come from a script, not a network."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from runtime.errors import ModelError
from runtime.llm import ModelRequest, ModelResponse, TextBlock, ToolUseBlock

Turn = ModelResponse | Exception
Script = Callable[[ModelRequest], Turn]


def say(text: str) -> ModelResponse:
    """A final answer."""
    return ModelResponse(content=[TextBlock(text=text)], stop_reason="end_turn")


def call(*calls: tuple[str, dict[str, Any]], text: str = "", step: int = 0) -> ModelResponse:
    """A response asking for tool calls, with ids derived from the step for stable keys."""
    blocks: list[TextBlock | ToolUseBlock] = [TextBlock(text=text)] if text else []
    blocks += [
        ToolUseBlock(id=f"toolu_{step:02d}_{i}", name=name, input=args)
        for i, (name, args) in enumerate(calls)
    ]
    return ModelResponse(content=blocks, stop_reason="tool_use")


def assistant_turns(request: ModelRequest) -> int:
    """How many times the model has answered in this transcript (the script's position)."""
    return sum(1 for message in request.messages if message["role"] == "assistant")


class ScriptedModel:
    """Answers from `turns` (the n-th answer for the n-th assistant turn) or a callable.

    A turn that is an exception is raised as a `ModelError`, to exercise model retries. Usage is
    reported as the size of the request and answer in characters, so it is deterministic.
    """

    def __init__(self, turns: Sequence[Turn] | Script) -> None:
        self._script: Script = turns if callable(turns) else self._from_list(list(turns))
        self.calls = 0

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
        turn = self._script(request)
        if isinstance(turn, Exception):
            raise ModelError(str(turn)) from turn
        response = turn.model_copy(deep=True)
        response.model = request.model
        response.usage.input_tokens = len(str(request.messages))
        response.usage.output_tokens = len(response.model_dump_json())
        return response

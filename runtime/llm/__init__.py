"""The model interface: a request in, normalized content blocks out.

Messages use the Anthropic Messages shape (role + content blocks), which every adapter maps to
and from. Responses are validated here, so a malformed model output is a `ModelError` (retried
under the agent's `ModelRetry`), never a crash deeper in the engine.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.errors import ModelError


class TextBlock(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"] = "text"
    text: str


class ToolUseBlock(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["tool_use"] = "tool_use"
    id: str = Field(min_length=1, max_length=100)
    name: str = Field(min_length=1, max_length=100)
    input: dict[str, Any]


class ThinkingBlock(BaseModel):
    """Extended thinking: stored with its signature and sent back unchanged (S6)."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str


class RedactedThinkingBlock(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


ContentBlock = Annotated[
    TextBlock | ToolUseBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]

# The Messages API's stop reasons; the engine handles each on purpose.
StopReason = Literal[
    "end_turn",
    "stop_sequence",
    "tool_use",
    "max_tokens",
    "pause_turn",
    "refusal",
    "model_context_window_exceeded",
]


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


class ModelResponse(BaseModel):
    content: list[ContentBlock]
    # None only for models that do not say (a scripted model); treated as end_turn/tool_use.
    stop_reason: StopReason | None = None
    usage: Usage = Field(default_factory=Usage)
    model: str = ""

    @property
    def text(self) -> str:
        return "".join(block.text for block in self.content if isinstance(block, TextBlock))

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        return [block for block in self.content if isinstance(block, ToolUseBlock)]

    @classmethod
    def parse(cls, data: object) -> ModelResponse:
        """Validate a model's raw output; failure is a `ModelError`."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ModelError(
                f"model output failed validation: {exc.error_count()} error(s)"
            ) from exc


class ToolSpec(BaseModel):
    name: str
    description: str
    input_schema: dict[str, Any]


class ModelRequest(BaseModel):
    model: str
    system: str
    messages: list[dict[str, Any]]
    tools: list[ToolSpec]
    max_tokens: int
    # Extended thinking budget in tokens; None leaves thinking off.
    thinking_budget: int | None = None
    # Seconds one request may take; None uses the adapter's default.
    timeout: float | None = None
    # Mark the system prompt, tools and transcript as cacheable (prompt caching).
    cache: bool = True


class Model(Protocol):
    """Anything that answers a `ModelRequest`. Raise `ModelError` for provider failures."""

    def complete(self, request: ModelRequest, *, operation_id: str) -> ModelResponse: ...

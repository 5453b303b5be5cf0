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


ContentBlock = Annotated[TextBlock | ToolUseBlock, Field(discriminator="type")]


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0


class ModelResponse(BaseModel):
    content: list[ContentBlock]
    stop_reason: str | None = None
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


class Model(Protocol):
    """Anything that answers a `ModelRequest`. Raise `ModelError` for provider failures."""

    def complete(self, request: ModelRequest, *, operation_id: str) -> ModelResponse: ...

"""The durable runtime: define agents and tools, run turns durably, and the operator verbs.

Public surface; everything else in this package is internal. `AnthropicModel` is imported on
first use: the `anthropic` SDK takes seconds to import, and only agents that talk to Claude
need it.
"""

from typing import TYPE_CHECKING, Any

from runtime.agents import (
    Agent,
    Cancelled,
    ModelRetry,
    Recovery,
    Tool,
    ToolContext,
    ToolDurabilityError,
    ask_operator,
    tool,
)
from runtime.control import cancel, list_runs, resolve, respond, resume, retry, submit
from runtime.engine import advance
from runtime.errors import (
    AgentDefinitionError,
    AgentOpsError,
    DurableConflictError,
    InteractionClosed,
    InteractionConflict,
    InvalidInput,
    InvalidTransition,
    LeaseLost,
    ModelError,
    NotBlocked,
    NotFound,
    RegistrationError,
    RetryRejected,
    SessionBusy,
)
from runtime.llm import (
    Model,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)
from runtime.registry import register, unregister

if TYPE_CHECKING:
    from runtime.llm.anthropic import AnthropicModel


def __getattr__(name: str) -> Any:
    if name == "AnthropicModel":
        from runtime.llm.anthropic import AnthropicModel

        return AnthropicModel
    raise AttributeError(f"module 'runtime' has no attribute {name!r}")


__all__ = [
    "Agent",
    "AgentDefinitionError",
    "AgentOpsError",
    "AnthropicModel",
    "Cancelled",
    "DurableConflictError",
    "InteractionClosed",
    "InteractionConflict",
    "InvalidInput",
    "InvalidTransition",
    "LeaseLost",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelRetry",
    "NotBlocked",
    "NotFound",
    "Recovery",
    "RegistrationError",
    "RetryRejected",
    "SessionBusy",
    "TextBlock",
    "ThinkingBlock",
    "Tool",
    "ToolContext",
    "ToolDurabilityError",
    "ToolUseBlock",
    "Usage",
    "advance",
    "ask_operator",
    "cancel",
    "list_runs",
    "register",
    "resolve",
    "respond",
    "resume",
    "retry",
    "submit",
    "tool",
    "unregister",
]

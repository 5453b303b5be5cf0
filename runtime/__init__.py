"""The durable runtime: define agents and tools, run turns durably, and the operator verbs.

Public surface; everything else in this package is internal. The names are imported on first
use: this package is also the Django app that holds the runtime's models, and Django imports an
app's package before its models may be loaded (and the `anthropic` SDK behind `AnthropicModel`
takes seconds to import, which only agents that talk to Claude need).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtime.agents import (
        Agent,
        Cancelled,
        ModelRetry,
        Money,
        Presentation,
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
        ApprovalRefused,
        ClaimConflict,
        DurableConflictError,
        ForkRefused,
        InteractionClosed,
        InteractionConflict,
        InvalidInput,
        InvalidTransition,
        LeaseLost,
        ModelError,
        NotBlocked,
        NotFound,
        ReauthenticationRequired,
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
    from runtime.llm.anthropic import AnthropicModel
    from runtime.registry import register, unregister
    from runtime.surgery import ForkPreview, fork, fork_preview, pause
    from runtime.work import assign, claim, edit, release

# The modules of the public names.
_MODULES = {
    "runtime.agents": (
        "Agent",
        "Cancelled",
        "ModelRetry",
        "Money",
        "Presentation",
        "Recovery",
        "Tool",
        "ToolContext",
        "ToolDurabilityError",
        "ask_operator",
        "tool",
    ),
    "runtime.errors": (
        "AgentDefinitionError",
        "AgentOpsError",
        "ApprovalRefused",
        "ClaimConflict",
        "DurableConflictError",
        "ForkRefused",
        "InteractionClosed",
        "InteractionConflict",
        "InvalidInput",
        "InvalidTransition",
        "LeaseLost",
        "ModelError",
        "NotBlocked",
        "NotFound",
        "ReauthenticationRequired",
        "RegistrationError",
        "RetryRejected",
        "SessionBusy",
    ),
    "runtime.llm.anthropic": ("AnthropicModel",),
    "runtime.llm": (
        "Model",
        "ModelRequest",
        "ModelResponse",
        "TextBlock",
        "ThinkingBlock",
        "ToolUseBlock",
        "Usage",
    ),
    "runtime.engine": ("advance",),
    "runtime.control": ("cancel", "list_runs", "resolve", "respond", "resume", "retry", "submit"),
    "runtime.registry": ("register", "unregister"),
    "runtime.work": ("assign", "claim", "edit", "release"),
    "runtime.surgery": ("ForkPreview", "fork", "fork_preview", "pause"),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "Agent",
    "AgentDefinitionError",
    "AgentOpsError",
    "AnthropicModel",
    "ApprovalRefused",
    "Cancelled",
    "ClaimConflict",
    "DurableConflictError",
    "ForkPreview",
    "ForkRefused",
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
    "Money",
    "NotBlocked",
    "NotFound",
    "Presentation",
    "ReauthenticationRequired",
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
    "assign",
    "cancel",
    "claim",
    "edit",
    "fork",
    "fork_preview",
    "list_runs",
    "pause",
    "register",
    "release",
    "resolve",
    "respond",
    "resume",
    "retry",
    "submit",
    "tool",
    "unregister",
]

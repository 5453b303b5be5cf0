"""The durable runtime: define agents and tools, run turns durably, and the operator verbs.

Public surface; everything else in this package is internal.
"""

from runtime.agents import (
    Agent,
    ModelRetry,
    Money,
    Presentation,
    Recovery,
    Tool,
    ToolContext,
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
from runtime.registry import register, unregister

__all__ = [
    "Agent",
    "AgentDefinitionError",
    "AgentOpsError",
    "DurableConflictError",
    "InteractionClosed",
    "InteractionConflict",
    "InvalidInput",
    "InvalidTransition",
    "LeaseLost",
    "ModelError",
    "ModelRetry",
    "Money",
    "NotBlocked",
    "NotFound",
    "Presentation",
    "Recovery",
    "RegistrationError",
    "RetryRejected",
    "SessionBusy",
    "Tool",
    "ToolContext",
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

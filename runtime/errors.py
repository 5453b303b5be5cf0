"""Every error the runtime raises, each with a stable `code` and a message built from ids."""

from __future__ import annotations

from collections.abc import Iterable


class AgentOpsError(Exception):
    """Base class of the runtime's errors; `code` is stable, the message is for people."""

    code = "agentops_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class AgentDefinitionError(AgentOpsError):
    """An agent or tool definition is invalid; raised at definition time."""

    code = "invalid_definition"


class NotFound(AgentOpsError):
    code = "not_found"


class InvalidInput(AgentOpsError):
    """Human- or model-supplied data failed validation; nothing was written."""

    code = "invalid_input"

    def __init__(self, message: str, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


class InvalidTransition(AgentOpsError):
    """The run is not in a state that allows this action."""

    code = "invalid_transition"


class SessionBusy(AgentOpsError):
    code = "session_busy"


class InteractionConflict(AgentOpsError):
    """Someone already answered this interaction differently."""

    code = "interaction_conflict"


class InteractionClosed(AgentOpsError):
    """The interaction is no longer pending (its run was cancelled)."""

    code = "interaction_closed"


class ApprovalRefused(AgentOpsError):
    """The approval policy forbids this decision (wrong group, four-eyes, expired, a missing
    permission); nothing was written. The message gives the reason."""

    code = "approval_refused"


class ReauthenticationRequired(AgentOpsError):
    """A high-risk approval needs a recent re-authentication (the console asks for the
    password again; the API needs a token with the high-risk scope); nothing was written."""

    code = "reauthentication_required"


class ClaimConflict(AgentOpsError):
    """Someone else holds the claim on this work item; the message names them and until when."""

    code = "claim_conflict"


class NotBlocked(AgentOpsError):
    """A resolve for an operation the run is not blocked on."""

    code = "not_blocked"


class RetryRejected(AgentOpsError):
    code = "retry_rejected"


class ForkRefused(AgentOpsError):
    """A fork that cannot be made as asked: the parent's state, an unreusable log, or manual
    calls that would run again without their acknowledgement."""

    code = "fork_refused"


class RegistrationError(AgentOpsError):
    """A register batch is invalid; nothing in it was written."""

    code = "registration_error"


class DurableConflictError(AgentOpsError):
    """Unregister refused: runs still need the version."""

    code = "durable_conflict"

    def __init__(self, message: str, run_ids: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.run_ids = list(run_ids)


class ModelError(AgentOpsError):
    """The model call failed (provider error, or output that failed validation).

    transient: waiting can heal it (429, 5xx, 529, timeouts, dropped connections); a 400 or 401
    will not. retry_after: the provider's `retry-after` in seconds, when it sent one.
    status: the HTTP status, when there was a response. reason: a short stable word for the
    console and the metrics ("rate_limited", "overloaded", "server_error", "timeout",
    "connection", "invalid_request", "authentication", "prompt_too_long", "invalid_output").
    """

    code = "model_error"

    def __init__(
        self,
        message: str,
        *,
        transient: bool = False,
        retry_after: float | None = None,
        status: int | None = None,
        reason: str = "",
    ) -> None:
        super().__init__(message)
        self.transient = transient
        self.retry_after = retry_after
        self.status = status
        self.reason = reason


class PromptTooLong(ModelError):
    """The request is over the model's context window: it will not fit by waiting."""

    code = "prompt_too_long"

    def __init__(self, message: str, *, status: int | None = 400) -> None:
        super().__init__(message, transient=False, status=status, reason="prompt_too_long")


class PauseRequested(Exception):
    """An intent was refused, having written nothing, because an operator asked the run to
    pause: the engine pauses it there, at a durable boundary."""


class LeaseLost(BaseException):
    """This worker's claim was taken over (or the run cancelled): it must commit nothing more.

    A BaseException so that a tool's `except Exception` cannot swallow it.
    """

    def __init__(self, run_id: object) -> None:
        super().__init__(f"lease on run {run_id} was lost; this worker stops")
        self.run_id = run_id

"""The API's error body and the one place where errors become HTTP statuses.

Every error answer is `{"error": {"code": ..., "message": ..., "details": [...]}}`. The code is
the runtime's stable `AgentOpsError.code` when the runtime refused, or one of the API's own
codes below; clients branch on the code, never on the message.
"""

from __future__ import annotations

from typing import Any

from runtime.errors import AgentOpsError, InvalidInput, NotFound

# The API's own codes, beside the runtime's: code -> (HTTP status, what it means).
API_CODES: dict[str, tuple[int, str]] = {
    "unauthenticated": (401, "No token, an unknown token, or a revoked one."),
    "scope_missing": (403, "The token does not carry the scope this action needs."),
    "permission_denied": (403, "The service account lacks the console permission it needs."),
    "rate_limited": (429, "Too many requests for this token; wait Retry-After seconds."),
    "idempotency_conflict": (409, "This Idempotency-Key was used with another request body."),
    "invalid_request": (422, "The request does not match the schema (see details)."),
    "malformed_body": (400, "The request body is not JSON."),
    "invalid_cursor": (400, "The cursor is not one this API returned."),
    "invalid_idempotency_key": (400, "The Idempotency-Key header is empty or too long."),
    "not_found": (404, "No such run, interaction, or path."),
    "method_not_allowed": (405, "The path exists, but not with this method."),
}
# The runtime's codes an API call can meet: code -> what it means.
RUNTIME_CODES: dict[str, str] = {
    "not_found": "The run, session, interaction or agent version does not exist.",
    "invalid_input": "The runtime refused the input (see message and details).",
    "invalid_transition": "The run is not in a state that allows this action.",
    "session_busy": "The session has an unfinished run.",
    "interaction_conflict": "The interaction was already answered differently (who, when).",
    "interaction_closed": "The interaction was closed: its run was cancelled.",
    "not_blocked": "The run is not blocked on that operation.",
    "retry_rejected": "The run cannot be retried now (the message says why).",
    "fork_refused": "The fork cannot be made as asked: the run's state, an unreusable log, or "
    "manual calls to run again without their acknowledgement (the message names them).",
}


class ApiError(Exception):
    """An error the API itself raises, with one of `API_CODES`."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        details: list[Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = API_CODES[code][0]
        self.message = message
        self.details = details or []
        self.headers = headers or {}


def runtime_status(exc: AgentOpsError) -> int:
    """404 for unknown ids, 422 for refused input, 409 for everything the state refuses."""
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, InvalidInput):
        return 422
    return 409


def body(code: str, message: str, details: list[Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or []}}


def runtime_details(exc: AgentOpsError) -> list[Any]:
    return list(exc.errors) if isinstance(exc, InvalidInput) else []

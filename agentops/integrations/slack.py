"""Slack's Web API for routes with a bot token: chat.postMessage to a channel id.

What Slack documents for chat.postMessage: a POST with `Authorization: Bearer xoxb-…` and a JSON
body (`channel`, `text`, `blocks`); the answer is HTTP 200 with `{"ok": true, "channel", "ts",
"message"}` or `{"ok": false, "error": "<code>"}`; a rate-limited call is HTTP 429 with a
`Retry-After` header in seconds (and the error `ratelimited`). An incoming webhook, by
contrast, answers plain text (`ok`, or the error as the body).

The errors fall in three groups, and the sender treats each its own way:

- the route itself is wrong (the token, or the channel): every message would fail the same way
  until a person fixes it, so the route is turned off and flagged with Slack's error;
- Slack is briefly unable (rate limits, internal errors): retried with the outbox's persisted
  backoff, never before `Retry-After`;
- anything else is about this message (e.g. `invalid_blocks`, `msg_too_long`): it is given up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agentops.integrations import outbound

METHOD = "chat.postMessage"
# The answer of a posted message echoes the message (its blocks): read enough to parse it.
READ_LIMIT = 64 * 1024

ROUTE_ERRORS = frozenset(
    {
        "account_inactive",
        "channel_not_found",
        "ekm_access_denied",
        "invalid_auth",
        "is_archived",
        "missing_scope",
        "no_permission",
        "not_allowed_token_type",
        "not_authed",
        "not_in_channel",
        "org_login_required",
        "restricted_action",
        "team_access_not_granted",
        "token_expired",
        "token_revoked",
    }
)
TRANSIENT_ERRORS = frozenset(
    {
        "fatal_error",
        "internal_error",
        "rate_limited",
        "ratelimited",
        "request_timeout",
        "service_unavailable",
    }
)


@dataclass(frozen=True)
class Posted:
    """How a chat.postMessage call ended."""

    status: int
    ok: bool
    # Slack's error code ("" when ok), or what was wrong with an answer that was not Slack's.
    error: str
    retry_after: float | None

    @property
    def route_refused(self) -> bool:
        return self.error in ROUTE_ERRORS

    @property
    def transient(self) -> bool:
        return self.status == 429 or self.status >= 500 or self.error in TRANSIENT_ERRORS


def method_url() -> str:
    return settings.AGENTOPS_SLACK_API_URL.rstrip("/") + "/" + METHOD


def post_message(token: str, channel: str, payload: dict[str, Any]) -> Posted:
    """Post `payload` (text and Block Kit blocks) to `channel` as the bot of `token`.

    Raises outbound.DestinationRefused, or OSError/HTTPException when Slack cannot be reached.
    """
    reply = outbound.post(
        method_url(),
        json.dumps({"channel": channel, **payload}).encode(),
        {"Authorization": f"Bearer {token}", "Content-Type": "application/json; charset=utf-8"},
        read_limit=READ_LIMIT,
    )
    try:
        answer = json.loads(reply.body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
        error = "ratelimited" if reply.status == 429 else f"HTTP {reply.status}: not Slack's answer"
        return Posted(reply.status, False, error, reply.retry_after)
    return Posted(
        reply.status,
        answer["ok"] and reply.status == 200,
        "" if answer["ok"] else str(answer.get("error", "unknown_error")),
        reply.retry_after,
    )

"""Slack's two ways in: an incoming webhook, and the Web API's chat.postMessage with a bot token.

What Slack documents for chat.postMessage: a POST with `Authorization: Bearer xoxb-…` and a JSON
body (`channel`, `text`, `blocks`); the answer is HTTP 200 with `{"ok": true, "channel", "ts",
"message"}` or `{"ok": false, "error": "<code>"}`; a rate-limited call is HTTP 429 with a
`Retry-After` header in seconds (and the error `ratelimited`).

What Slack documents for an incoming webhook: a POST of the JSON message to the webhook's URL (the
URL is the credential and names the channel); the answer is plain text, HTTP 200 `ok`, or an
HTTP 400, 403, 404 or 410 whose body is the error code (`invalid_payload`, `invalid_token`,
`no_service`, `channel_not_found`, `channel_is_archived`, …), a 429 when rate limited, a 5xx
(`rollup_error`) when Slack failed.

Both answers become a `Posted`, and the errors fall in three groups, whichever way a route posts:

- the route itself is wrong (the token, the webhook URL, or the channel): every message would
  fail the same way until a person fixes it, so the route is turned off and flagged with Slack's
  error;
- Slack is briefly unable (rate limits, internal errors): retried with the outbox's persisted
  backoff, never before `Retry-After`;
- anything else is about this message (e.g. `invalid_blocks`, `msg_too_long`, `invalid_payload`,
  `no_text`): it is given up.
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
        # chat.postMessage: the bot token, or the channel id and the bot's place in it.
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
        # An incoming webhook: its URL was removed, disabled or is not one (`no_service`,
        # `no_service_id`, `invalid_token`), its workspace is gone (`no_team`, `team_disabled`),
        # or its channel no longer takes its posts (removed, archived, restricted by an admin).
        "action_prohibited",
        "channel_is_archived",
        "invalid_token",
        "no_service",
        "no_service_id",
        "no_team",
        "posting_to_general_channel_denied",
        "team_disabled",
    }
)
TRANSIENT_ERRORS = frozenset(
    {
        "fatal_error",
        "internal_error",
        "rate_limited",
        "ratelimited",
        "request_timeout",
        "rollup_error",
        "service_unavailable",
    }
)


@dataclass(frozen=True)
class Posted:
    """How a post to Slack ended, by a bot token or an incoming webhook."""

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


def post_to_webhook(url: str, payload: dict[str, Any]) -> Posted:
    """Post `payload` (text and Block Kit blocks) to the incoming webhook at `url`.

    Raises outbound.DestinationRefused, or OSError/HTTPException when Slack cannot be reached.
    """
    reply = outbound.post(url, json.dumps(payload).encode(), {})
    if reply.status == 200:
        return Posted(reply.status, True, "", reply.retry_after)
    # Slack's body is the bare error code; any other body (a proxy's page) stands as the error, to
    # be read in the admin, and is about this message only unless the status says otherwise.
    error = reply.body.strip() or f"HTTP {reply.status}"
    return Posted(reply.status, False, error, reply.retry_after)

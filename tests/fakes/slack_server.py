"""A local fake of Slack for notification routes, written from Slack's documentation: the Web API
method chat.postMessage (bot tokens) and incoming webhooks.

`FakeSlack` listens on 127.0.0.1 (an ephemeral port; point AGENTOPS_SLACK_API_URL at `url`, a
route's webhook URL at `hook_url()`) and answers as Slack documents it.

`POST /api/chat.postMessage`:

- authentication by `Authorization: Bearer <token>`: no header is `not_authed`, an unknown token
  `invalid_auth`, a token the workspace revoked `token_revoked`;
- a JSON body (`Content-Type: application/json`) with `channel` (an id) and `text` or `blocks`:
  no channel or an unknown one is `channel_not_found`, a channel the bot was not added to is
  `not_in_channel`, an archived one `is_archived`, neither text nor blocks `no_text`, blocks
  that are not a list of objects with a `type` `invalid_blocks`;
- success is HTTP 200 `{"ok": true, "channel", "ts", "message"}` (the message echoed, blocks
  included); every error is HTTP 200 `{"ok": false, "error": "<code>"}`, except a rate-limited
  call: HTTP 429 with `Retry-After: <seconds>` and `{"ok": false, "error": "ratelimited"}`.

`POST /services/<team>/<hook>/<secret>`, an incoming webhook (the URL is the credential and
names the channel chosen when the webhook was installed): the answer is plain text, `ok` with
HTTP 200, else the error code as the body with the HTTP status of Slack's error table
(`HOOK_ERRORS`):

- a hook that does not exist or was removed is `no_service`, a hook id that is not one
  `no_service_id`, a hook whose secret is wrong or was regenerated `invalid_token`; a workspace
  that is gone `no_team`, one that was disabled `team_disabled`;
- a hook whose channel was deleted is `channel_not_found`, archived `channel_is_archived`; a
  workspace whose admin restricted the webhook's posting `action_prohibited`, a #general whose
  posting is restricted `posting_to_general_channel_denied`;
- a body that is not a JSON object is `invalid_payload`, more than 100 attachments
  `too_many_attachments`, neither text, blocks nor attachments `no_text`.

A test sets the workspace (`tokens`, `channels`, `members`, `hooks`, …) and may queue a rate
limit (`rate_limit(seconds)`) or an internal error for the Web API, or any documented webhook
error for the next webhook post (`refuse_next_post(code)`, for the errors about one message that
our own messages never earn); every request is recorded and each posted message kept per channel.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BOT_TOKEN = "xoxb-1111-2222-fakeslacktoken"
CHANNEL = "C0PAYMENTS"
GENERAL = "C0GENERAL"
TEAM = "T0FAKETEAM"
HOOK = "B0PAYMENTS"
HOOK_SECRET = "fakeHookSecret000000000000"
# Slack's table of incoming webhook errors: the HTTP status of each code (the body is the code).
HOOK_ERRORS = {
    "invalid_payload": 400,
    "no_service_id": 400,
    "no_text": 400,
    "too_many_attachments": 400,
    "user_not_found": 400,
    "action_prohibited": 403,
    "invalid_token": 403,
    "posting_to_general_channel_denied": 403,
    "channel_not_found": 404,
    "no_service": 404,
    "no_team": 404,
    "channel_is_archived": 410,
    "team_disabled": 410,
    "rollup_error": 500,
}
MAX_ATTACHMENTS = 100


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Hook:
    """An installed incoming webhook: its workspace, the channel it posts to, its secret."""

    team: str
    channel: str
    secret: str


@dataclass
class FakeSlack:
    tokens: set[str] = field(default_factory=lambda: {BOT_TOKEN})
    revoked: set[str] = field(default_factory=set)
    # Channel ids that exist, those the bot is a member of, and the archived ones.
    channels: set[str] = field(default_factory=lambda: {CHANNEL, GENERAL, "C0ELSEWHERE"})
    members: set[str] = field(default_factory=lambda: {CHANNEL})
    archived: set[str] = field(default_factory=set)
    # Incoming webhooks by hook id; the workspaces that exist, and their admins' restrictions.
    hooks: dict[str, Hook] = field(default_factory=lambda: {HOOK: Hook(TEAM, CHANNEL, HOOK_SECRET)})
    teams: set[str] = field(default_factory=lambda: {TEAM})
    disabled_teams: set[str] = field(default_factory=set)
    # Workspaces where an admin restricted what webhooks may post, and where only some may
    # post to #general (GENERAL).
    prohibited_teams: set[str] = field(default_factory=set)
    general_restricted: set[str] = field(default_factory=set)
    requests: list[Request] = field(default_factory=list)
    posted: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Queued before the normal answer: ("ratelimited", seconds) or ("internal_error", 0).
    troubles: list[tuple[str, int]] = field(default_factory=list)
    # Webhook error codes (of HOOK_ERRORS) answered to the next webhook posts, one each.
    hook_troubles: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/api"

    def hook_url(self, hook: str = HOOK) -> str:
        """The incoming webhook URL Slack gives out for `hook` when it is installed."""
        assert self._server is not None
        made = self.hooks[hook]
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}/services/{made.team}/{hook}/{made.secret}"

    def rate_limit(self, seconds: int) -> None:
        self.troubles.append(("ratelimited", seconds))

    def refuse_next_post(self, code: str) -> None:
        if code not in HOOK_ERRORS:
            raise ValueError(f"{code!r} is not an error Slack documents for incoming webhooks")
        self.hook_troubles.append(code)

    def __enter__(self) -> FakeSlack:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                request = Request(self.path, dict(self.headers.items()), self.rfile.read(length))
                with fake._lock:
                    fake.requests.append(request)
                    if request.path.startswith("/services/"):
                        status, text = fake._answer_hook(request)
                        body, kind, headers = text.encode(), "text/plain", {}
                    else:
                        status, answer, headers = fake._answer(request)
                        body, kind = json.dumps(answer).encode(), "application/json"
                self.send_response(status)
                self.send_header("Content-Type", f"{kind}; charset=utf-8")
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _answer(self, request: Request) -> tuple[int, dict[str, Any], dict[str, str]]:
        if request.path != "/api/chat.postMessage":
            return 404, {"ok": False, "error": "unknown_method"}, {}
        if self.troubles:
            trouble, seconds = self.troubles.pop(0)
            if trouble == "ratelimited":
                return 429, _error("ratelimited"), {"Retry-After": str(seconds)}
            return 200, _error(trouble), {}
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme != "Bearer" or not token:
            return 200, _error("not_authed"), {}
        if token in self.revoked:
            return 200, _error("token_revoked"), {}
        if token not in self.tokens:
            return 200, _error("invalid_auth"), {}
        if not request.headers.get("Content-Type", "").startswith("application/json"):
            return 200, _error("invalid_form_data"), {}
        try:
            body = request.json
        except ValueError:
            return 200, _error("invalid_json"), {}
        channel = body.get("channel")
        if channel not in self.channels:
            return 200, _error("channel_not_found"), {}
        if channel in self.archived:
            return 200, _error("is_archived"), {}
        if channel not in self.members:
            return 200, _error("not_in_channel"), {}
        blocks = body.get("blocks")
        if not body.get("text") and not blocks:
            return 200, _error("no_text"), {}
        if blocks is not None and not (
            isinstance(blocks, list) and all(isinstance(b, dict) and "type" in b for b in blocks)
        ):
            return 200, _error("invalid_blocks"), {}
        ts = f"{time.time():.6f}"
        message = {"type": "message", "text": body.get("text", ""), "blocks": blocks, "ts": ts}
        self.posted.setdefault(channel, []).append(message)
        return 200, {"ok": True, "channel": channel, "ts": ts, "message": message}, {}

    def _answer_hook(self, request: Request) -> tuple[int, str]:
        error = self._hook_error(request)
        return (200, "ok") if error is None else (HOOK_ERRORS[error], error)

    def _hook_error(self, request: Request) -> str | None:
        if self.hook_troubles:
            return self.hook_troubles.pop(0)
        parts = request.path.removeprefix("/services/").split("/")
        if len(parts) != 3:
            return "no_service"
        team, hook_id, secret = parts
        if not hook_id.startswith("B"):
            return "no_service_id"
        hook = self.hooks.get(hook_id)
        if hook is None or hook.team != team:
            return "no_service"
        if hook.secret != secret:
            return "invalid_token"
        if team not in self.teams:
            return "no_team"
        if team in self.disabled_teams:
            return "team_disabled"
        try:
            body = request.json
        except ValueError:
            return "invalid_payload"
        if not isinstance(body, dict):
            return "invalid_payload"
        if hook.channel not in self.channels:
            return "channel_not_found"
        if hook.channel in self.archived:
            return "channel_is_archived"
        if team in self.prohibited_teams:
            return "action_prohibited"
        if hook.channel == GENERAL and team in self.general_restricted:
            return "posting_to_general_channel_denied"
        attachments = body.get("attachments") or []
        if len(attachments) > MAX_ATTACHMENTS:
            return "too_many_attachments"
        if not body.get("text") and not body.get("blocks") and not attachments:
            return "no_text"
        message = {"type": "message", "text": body.get("text", ""), "blocks": body.get("blocks")}
        self.posted.setdefault(hook.channel, []).append(message)
        return None


def _error(code: str) -> dict[str, Any]:
    return {"ok": False, "error": code}

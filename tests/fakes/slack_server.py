"""A local fake of Slack's Web API method chat.postMessage, written from Slack's documentation.

`FakeSlack` listens on 127.0.0.1 (an ephemeral port; point AGENTOPS_SLACK_API_URL at `url`) and
answers `POST /api/chat.postMessage` as Slack documents it:

- authentication by `Authorization: Bearer <token>`: no header is `not_authed`, an unknown token
  `invalid_auth`, a token the workspace revoked `token_revoked`;
- a JSON body (`Content-Type: application/json`) with `channel` (an id) and `text` or `blocks`:
  no channel or an unknown one is `channel_not_found`, a channel the bot was not added to is
  `not_in_channel`, an archived one `is_archived`, neither text nor blocks `no_text`, blocks
  that are not a list of objects with a `type` `invalid_blocks`;
- success is HTTP 200 `{"ok": true, "channel", "ts", "message"}` (the message echoed, blocks
  included); every error is HTTP 200 `{"ok": false, "error": "<code>"}`, except a rate-limited
  call: HTTP 429 with `Retry-After: <seconds>` and `{"ok": false, "error": "ratelimited"}`.

A test sets the workspace (`tokens`, `channels`, `members`) and may queue a rate limit
(`rate_limit(seconds)`) or an internal error; every request is recorded and each posted message
kept per channel.
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


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class FakeSlack:
    tokens: set[str] = field(default_factory=lambda: {BOT_TOKEN})
    revoked: set[str] = field(default_factory=set)
    # Channel ids that exist, those the bot is a member of, and the archived ones.
    channels: set[str] = field(default_factory=lambda: {CHANNEL, "C0ELSEWHERE"})
    members: set[str] = field(default_factory=lambda: {CHANNEL})
    archived: set[str] = field(default_factory=set)
    requests: list[Request] = field(default_factory=list)
    posted: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Queued before the normal answer: ("ratelimited", seconds) or ("internal_error", 0).
    troubles: list[tuple[str, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/api"

    def rate_limit(self, seconds: int) -> None:
        self.troubles.append(("ratelimited", seconds))

    def __enter__(self) -> FakeSlack:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                request = Request(self.path, dict(self.headers.items()), self.rfile.read(length))
                with fake._lock:
                    fake.requests.append(request)
                    status, answer, headers = fake._answer(request)
                body = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
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


def _error(code: str) -> dict[str, Any]:
    return {"ok": False, "error": code}

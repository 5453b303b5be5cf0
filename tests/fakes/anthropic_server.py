"""A local fake of the Anthropic Messages API, for driving the real SDK without a network.

`FakeAnthropicServer` listens on 127.0.0.1 on an ephemeral port and answers `POST /v1/messages`
from a queue of scripted replies, recording every request it receives (headers and JSON body) so
a test can assert what the SDK actually sent, and how many times. Use it as a context manager:

    with FakeAnthropicServer() as server:
        server.reply(200, message_body([text_block("hi")]))
        client = anthropic.Anthropic(api_key="test-key", base_url=server.url, max_retries=0)
        ...
        assert server.requests[0].body["model"] == "claude-test"

The helpers build bodies in the shape the real API returns: `message_body`, `text_block`,
`tool_use_block`, and `error_body`.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

MESSAGES_PATH = "/v1/messages"
DEFAULT_MODEL = "claude-test-model"

_message_ids = itertools.count(1)


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it. Header names are lower-cased."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True)
class ScriptedReply:
    """What the server answers to one request; `delay` (seconds) is waited before answering."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def text_block(text: str) -> dict[str, Any]:
    """A `text` content block."""
    return {"type": "text", "text": text, "citations": None}


def tool_use_block(id: str, name: str, input: dict[str, Any]) -> dict[str, Any]:
    """A `tool_use` content block (parameter names follow the API's field names)."""
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def message_body(
    content: list[dict[str, Any]],
    *,
    model: str = DEFAULT_MODEL,
    stop_reason: str | None = "end_turn",
    stop_sequence: str | None = None,
    input_tokens: int = 10,
    output_tokens: int = 5,
    message_id: str | None = None,
) -> dict[str, Any]:
    """A successful Messages API response body."""
    return {
        "id": message_id or f"msg_fake{next(_message_ids):06d}",
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": model,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def error_body(error_type: str, message: str) -> dict[str, Any]:
    """An error response body, e.g. `error_body("overloaded_error", "Overloaded")`."""
    return {"type": "error", "error": {"type": error_type, "message": message}}


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        self.server.fake.record(
            RecordedRequest(
                method="POST",
                path=self.path,
                headers={name.lower(): value for name, value in self.headers.items()},
                body=body,
            )
        )
        if self.path.split("?", 1)[0] != MESSAGES_PATH:
            self._send(ScriptedReply(404, error_body("not_found_error", f"no route {self.path}")))
            return
        self._send(self.server.fake.next_reply())

    def _send(self, reply: ScriptedReply) -> None:
        if reply.delay and self.server.fake.stopping.wait(reply.delay):
            return  # the server is stopping: drop the connection instead of answering
        payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        self.send_response(reply.status)
        headers = {"Content-Type": "application/json", "request-id": "req_fake", **reply.headers}
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output quiet


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeAnthropicServer


class FakeAnthropicServer:
    """A scripted Messages API on 127.0.0.1; see the module docstring.

    Replies are consumed in order, one per request. When the queue is empty the server answers
    500 with an `api_error` body, so a test that under-scripts fails loudly rather than hanging.
    Each response closes its connection (HTTP/1.0), so once `stop()` returns nothing can still
    be answered on a pooled keep-alive connection.
    """

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.stopping = threading.Event()
        self._replies: deque[ScriptedReply] = deque()
        self._lock = threading.Lock()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    def start(self) -> FakeAnthropicServer:
        """Bind an ephemeral port and serve in a daemon thread; sets `url`."""
        if self._httpd is not None:
            raise RuntimeError("the fake Anthropic server is already started")
        httpd = _Server(("127.0.0.1", 0), _Handler)
        httpd.fake = self
        host, port = httpd.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-anthropic-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port; safe to call more than once."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self.stopping.set()
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeAnthropicServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def reply(
        self,
        status: int,
        body: Any,
        *,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        """Queue the answer to the next unanswered request (`body` is JSON, or raw bytes)."""
        with self._lock:
            self._replies.append(ScriptedReply(status, body, dict(headers or {}), delay))

    def reply_message(self, content: list[dict[str, Any]], **fields: Any) -> None:
        """Queue a 200 Messages API response; `fields` go to `message_body`."""
        self.reply(200, message_body(content, **fields))

    def reply_error(self, status: int, error_type: str, message: str) -> None:
        """Queue an error response, e.g. `reply_error(529, "overloaded_error", "Overloaded")`."""
        self.reply(status, error_body(error_type, message))

    def record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def next_reply(self) -> ScriptedReply:
        with self._lock:
            if self._replies:
                return self._replies.popleft()
        return ScriptedReply(500, error_body("api_error", "fake server: no scripted reply left"))

    @property
    def pending_replies(self) -> int:
        """How many scripted replies have not been served yet."""
        with self._lock:
            return len(self._replies)

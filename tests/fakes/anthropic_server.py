"""A local fake of the Anthropic Messages API, for driving the real SDK without a network.

`FakeAnthropicServer` listens on 127.0.0.1 on an ephemeral port and answers `POST /v1/messages`
from a queue of scripted replies, recording every request it receives (headers and JSON body) so
a test can assert what the SDK actually sent, and how many times. Use it as a context manager:

    with FakeAnthropicServer() as server:
        server.reply_message([text_block("hi")])
        client = anthropic.Anthropic(api_key="test-key", base_url=server.url, max_retries=0)
        ...
        assert server.requests[0].body["model"] == "claude-test"

Written from the API's documentation (Messages, errors, stop reasons, extended thinking, prompt
caching, streaming), not from what our adapter sends:

- Requests are validated as the API does, before any scripted reply is used: a 400
  `invalid_request_error` for missing fields, a message with empty content (except the optional
  final assistant message), tool_result ids that do not answer the previous turn's tool_use ids
  (or tool_use ids left unanswered), tool_result blocks after other content, a thinking budget
  under 1024 or not under max_tokens, a turn continuing tool use with thinking on that does not
  start with a thinking block, thinking blocks altered or without their signature, more than four
  cache_control breakpoints or one on a thinking block. Consecutive turns of one role are
  combined into one turn, as the API documents, rather than refused.
- Errors have the documented shape, `{"type": "error", "error": {"type", "message"},
  "request_id"}`, and every response carries a `request-id` header.
- Replies can be any status and body, a reset connection, or (for `stream: true` requests) the
  documented server-sent event sequence built from a scripted message, optionally cut by an
  `error` event after the 200 status line.
- Thinking blocks are signed by the server (`thinking_block`, `redacted_thinking_block`), so a
  test can send them back and see an altered one refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import secrets
import socket
import struct
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

MESSAGES_PATH = "/v1/messages"
DEFAULT_MODEL = "claude-test-model"
MIN_THINKING_BUDGET = 1024
MAX_CACHE_BREAKPOINTS = 4

_message_ids = itertools.count(1)
_request_ids = itertools.count(1)
# Signs the thinking blocks this process's fakes hand out, as the real API signs its own.
_SIGNING_KEY = secrets.token_bytes(32)


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it. Header names are lower-cased."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True)
class ScriptedReply:
    """What the server answers to one request; `delay` (seconds) is waited before answering.

    `reset` drops the connection with a TCP reset instead of answering (for a streaming 200,
    after the first content block). For a streaming request, a 200 message body is sent as
    events; `stream_error` then ends the stream with that error event instead of
    `message_stop`, after the first content block.
    """

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    reset: bool = False
    stream_error: dict[str, Any] | None = None


class InvalidRequest(Exception):
    """A request the real API would refuse with 400 invalid_request_error."""


def _sign(kind: str, payload: str) -> str:
    digest = hmac.new(_SIGNING_KEY, f"{kind}:{payload}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def text_block(text: str) -> dict[str, Any]:
    """A `text` content block."""
    return {"type": "text", "text": text, "citations": None}


def tool_use_block(id: str, name: str, input: dict[str, Any]) -> dict[str, Any]:
    """A `tool_use` content block (parameter names follow the API's field names)."""
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def thinking_block(thinking: str) -> dict[str, Any]:
    """A `thinking` block with the signature the server will check when it comes back."""
    return {"type": "thinking", "thinking": thinking, "signature": _sign("thinking", thinking)}


def redacted_thinking_block(secret_text: str) -> dict[str, Any]:
    """A `redacted_thinking` block: opaque data the server can recognise as its own."""
    sealed = base64.b64encode(secret_text.encode()).decode()
    return {"type": "redacted_thinking", "data": f"{sealed}.{_sign('redacted', sealed)}"}


def message_body(
    content: list[dict[str, Any]],
    *,
    model: str = DEFAULT_MODEL,
    stop_reason: str | None = "end_turn",
    stop_sequence: str | None = None,
    input_tokens: int = 10,
    output_tokens: int = 5,
    cache_creation_input_tokens: int | None = 0,
    cache_read_input_tokens: int | None = 0,
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
            "cache_creation_input_tokens": cache_creation_input_tokens,
            "cache_read_input_tokens": cache_read_input_tokens,
        },
    }


def error_body(error_type: str, message: str) -> dict[str, Any]:
    """An error response body, e.g. `error_body("overloaded_error", "Overloaded")`."""
    return {"type": "error", "error": {"type": error_type, "message": message}}


# --- request validation, after the documented rules ------------------------------------------


def validate_request(body: Any) -> None:
    """Raise `InvalidRequest` with the API's kind of message when the API would refuse `body`."""
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    for name in ("model", "max_tokens", "messages"):
        if name not in body:
            raise InvalidRequest(f"{name}: Field required")
    max_tokens = body["max_tokens"]
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise InvalidRequest("max_tokens: Input should be a positive integer")
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: at least one message is required")
    thinking = _validate_thinking_config(body.get("thinking"), max_tokens)
    turns = _turns(messages)
    _validate_tool_pairs(turns)
    _validate_thinking_blocks(turns, thinking_enabled=thinking)
    _validate_cache_control(body)


def _turns(messages: list[Any]) -> list[tuple[str, list[dict[str, Any]], list[str]]]:
    """Messages as turns (role, blocks, where each block came from), same roles combined."""
    turns: list[tuple[str, list[dict[str, Any]], list[str]]] = []
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise InvalidRequest(f"{where}.role: Input should be 'user' or 'assistant'")
        content = message.get("content")
        final_assistant = index == len(messages) - 1 and message["role"] == "assistant"
        if isinstance(content, str):
            blocks = [{"type": "text", "text": content}] if content else []
        elif isinstance(content, list):
            blocks = content
        else:
            raise InvalidRequest(f"{where}.content: Input should be a string or a list of blocks")
        if not blocks and not final_assistant:
            raise InvalidRequest(
                f"{where}: all messages must have non-empty content except for the optional "
                "final assistant message"
            )
        for position, block in enumerate(blocks):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise InvalidRequest(f"{where}.content.{position}: a block needs a type")
            if block["type"] == "text" and not block.get("text"):
                raise InvalidRequest(
                    f"{where}.content.{position}: text content blocks must be non-empty"
                )
        places = [f"{where}.content.{position}" for position in range(len(blocks))]
        if turns and turns[-1][0] == message["role"]:
            turns[-1][1].extend(blocks)
            turns[-1][2].extend(places)
        else:
            turns.append((message["role"], list(blocks), places))
    return turns


def _validate_tool_pairs(turns: list[tuple[str, list[dict[str, Any]], list[str]]]) -> None:
    for number, (role, blocks, places) in enumerate(turns):
        results = [block for block in blocks if block["type"] == "tool_result"]
        if results and role != "user":
            raise InvalidRequest(
                f"{places[0]}: tool_result blocks are only allowed in user messages"
            )
        seen_other = False
        for block, place in zip(blocks, places, strict=True):
            if block["type"] == "tool_result" and seen_other:
                raise InvalidRequest(
                    f"{place}: tool_result blocks must come first in the content, "
                    "before any other block"
                )
            seen_other = seen_other or block["type"] != "tool_result"
        asked = (
            [block.get("id") for block in turns[number - 1][1] if block["type"] == "tool_use"]
            if number > 0 and turns[number - 1][0] == "assistant"
            else []
        )
        answered = [block.get("tool_use_id") for block in results]
        unexpected = [tool_id for tool_id in answered if tool_id not in asked]
        if unexpected:
            raise InvalidRequest(
                f"{places[0]}: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{', '.join(map(str, unexpected))}. Each `tool_result` block must have a "
                "corresponding `tool_use` block in the previous message."
            )
        if role == "assistant" and number + 1 < len(turns):
            asked_here = [block.get("id") for block in blocks if block["type"] == "tool_use"]
            answers = {
                block.get("tool_use_id")
                for block in turns[number + 1][1]
                if block["type"] == "tool_result"
            }
            missing = [tool_id for tool_id in asked_here if tool_id not in answers]
            if missing:
                raise InvalidRequest(
                    f"{places[0]}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(map(str, missing))}. Each `tool_use` block "
                    "must have a corresponding `tool_result` block in the next message."
                )


def _validate_thinking_config(thinking: Any, max_tokens: int) -> bool:
    if thinking is None or (isinstance(thinking, dict) and thinking.get("type") == "disabled"):
        return False
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        raise InvalidRequest("thinking.type: Input should be 'enabled' or 'disabled'")
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or budget < MIN_THINKING_BUDGET:
        raise InvalidRequest(
            "thinking.enabled.budget_tokens: Input should be greater than or equal to "
            f"{MIN_THINKING_BUDGET}"
        )
    if max_tokens <= budget:
        raise InvalidRequest("`max_tokens` must be greater than `thinking.budget_tokens`")
    return True


def _validate_thinking_blocks(
    turns: list[tuple[str, list[dict[str, Any]], list[str]]], *, thinking_enabled: bool
) -> None:
    for _role, blocks, places in turns:
        for block, place in zip(blocks, places, strict=True):
            if block["type"] == "thinking":
                signature = block.get("signature")
                if not signature:
                    raise InvalidRequest(f"{place}.signature: Field required")
                if not hmac.compare_digest(
                    str(signature), _sign("thinking", str(block.get("thinking")))
                ):
                    raise InvalidRequest(f"{place}: Invalid `signature` in `thinking` block")
            elif block["type"] == "redacted_thinking":
                sealed, _, signature = str(block.get("data", "")).partition(".")
                if not hmac.compare_digest(signature, _sign("redacted", sealed)):
                    raise InvalidRequest(f"{place}: Invalid `data` in `redacted_thinking` block")
    # Continuing tool use with thinking on: the assistant turn whose tool calls the last user
    # turn answers must start with its thinking, as it was given.
    if thinking_enabled and len(turns) >= 2:
        role, blocks, _places = turns[-1]
        previous_role, previous_blocks, previous_places = turns[-2]
        continues_tool_use = role == "user" and any(b["type"] == "tool_result" for b in blocks)
        if continues_tool_use and previous_role == "assistant":
            first = previous_blocks[0]["type"]
            if first not in ("thinking", "redacted_thinking"):
                raise InvalidRequest(
                    f"{previous_places[0]}.type: Expected `thinking` or `redacted_thinking`, but "
                    f"found `{first}`. When `thinking` is enabled, a final `assistant` message "
                    "must start with a thinking block."
                )


def _validate_cache_control(body: dict[str, Any]) -> None:
    marked: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, list):
        marked += [
            block for block in system if isinstance(block, dict) and block.get("cache_control")
        ]
    marked += [
        tool
        for tool in body.get("tools") or []
        if isinstance(tool, dict) and tool.get("cache_control")
    ]
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, list):
            marked += [block for block in content if block.get("cache_control")]
    if len(marked) > MAX_CACHE_BREAKPOINTS:
        raise InvalidRequest(
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(marked)}."
        )
    for block in marked:
        if block.get("type") in ("thinking", "redacted_thinking"):
            raise InvalidRequest("thinking blocks cannot be marked with cache_control")
        if block.get("type") == "text" and not block.get("text"):
            raise InvalidRequest("cache_control cannot be set for empty text blocks")


# --- streaming ---------------------------------------------------------------------------------


def stream_events(
    message: dict[str, Any], *, error: dict[str, Any] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The documented event sequence for `message`: message_start, per block start / deltas /
    stop, message_delta, message_stop. With `error`, an error event follows the first block."""
    usage = message["usage"]
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for index, block in enumerate(message["content"]):
        events += _block_events(index, block)
        if index == 0:
            events.append(("ping", {"type": "ping"}))
            if error is not None:
                events.append(("error", {"type": "error", "error": error}))
                return events
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": message["stop_reason"],
                    "stop_sequence": message["stop_sequence"],
                },
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _block_events(index: int, block: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    def delta(payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return (
            "content_block_delta",
            {"type": "content_block_delta", "index": index, "delta": payload},
        )

    kind = block["type"]
    if kind == "text":
        first = {"type": "text", "text": ""}
        deltas = [delta({"type": "text_delta", "text": piece}) for piece in _pieces(block["text"])]
    elif kind == "tool_use":
        first = {**block, "input": {}}
        raw = json.dumps(block["input"])
        deltas = [
            delta({"type": "input_json_delta", "partial_json": piece}) for piece in _pieces(raw)
        ]
    elif kind == "thinking":
        first = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [
            delta({"type": "thinking_delta", "thinking": piece})
            for piece in _pieces(block["thinking"])
        ]
        deltas.append(delta({"type": "signature_delta", "signature": block["signature"]}))
    else:  # redacted_thinking and anything else arrive whole in their start event
        first, deltas = block, []
    return [
        (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": first},
        ),
        *deltas,
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def _pieces(text: str, size: int = 7) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)] or [""]


# --- the server ------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        fake = self.server.fake
        request = RecordedRequest(
            method="POST",
            path=self.path,
            headers={name.lower(): value for name, value in self.headers.items()},
            body=body,
        )
        fake.record(request)
        if self.path.split("?", 1)[0] != MESSAGES_PATH:
            self._send(ScriptedReply(404, error_body("not_found_error", f"no route {self.path}")))
            return
        refusal = fake.refusal(request)
        if refusal is not None:
            self._send(refusal)
            return
        reply = fake.next_reply()
        streaming = isinstance(body, dict) and body.get("stream") is True
        if streaming and reply.status == 200 and isinstance(reply.body, dict):
            self._send_stream(reply)
        else:
            self._send(reply)

    def _wait(self, reply: ScriptedReply) -> bool:
        """Wait the reply's delay; False when the server is stopping (then drop the request)."""
        return not (reply.delay and self.server.fake.stopping.wait(reply.delay))

    def _send(self, reply: ScriptedReply) -> None:
        if not self._wait(reply):
            return
        if reply.reset:
            self._reset()
            return
        body = reply.body
        request_id = f"req_fake{next(_request_ids):06d}"
        if isinstance(body, dict) and body.get("type") == "error":
            body = {**body, "request_id": request_id}
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(reply.status)
        headers = {"Content-Type": "application/json", "request-id": request_id, **reply.headers}
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _send_stream(self, reply: ScriptedReply) -> None:
        if not self._wait(reply):
            return
        self.send_response(200)
        headers = {
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "request-id": f"req_fake{next(_request_ids):06d}",
            **reply.headers,
        }
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        events = stream_events(reply.body, error=reply.stream_error)
        if reply.reset:  # cut after the message starts and its first block is sent
            events = events[: 1 + len(_block_events(0, reply.body["content"][0]))]
        for event, data in events:
            self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()
        if reply.reset:
            self._reset()

    def _reset(self) -> None:
        # SO_LINGER 0: closing sends a TCP reset, as a dropped connection looks to a client.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output quiet


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeAnthropicServer


class FakeAnthropicServer:
    """A scripted Messages API on 127.0.0.1; see the module docstring.

    Replies are consumed in order, one per valid request. When the queue is empty the server
    answers 500 with an `api_error` body, so a test that under-scripts fails loudly rather than
    hanging. Each response closes its connection (HTTP/1.0), so once `stop()` returns nothing can
    still be answered on a pooled keep-alive connection. `api_key`, when given, is the only key
    accepted (others get 401); `validate=False` turns the request checks off.
    """

    def __init__(self, *, api_key: str | None = None, validate: bool = True) -> None:
        self.requests: list[RecordedRequest] = []
        self.stopping = threading.Event()
        self.api_key = api_key
        self.validate = validate
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

    # --- scripting ---

    def reply(
        self,
        status: int,
        body: Any,
        *,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        """Queue the answer to the next valid request (`body` is JSON, or raw bytes)."""
        self._queue(ScriptedReply(status, body, dict(headers or {}), delay))

    def reply_message(
        self, content: list[dict[str, Any]], *, headers: dict[str, str] | None = None, **fields: Any
    ) -> None:
        """Queue a 200 Messages API response; `fields` go to `message_body`."""
        self.reply(200, message_body(content, **fields), headers=headers)

    def reply_error(
        self, status: int, error_type: str, message: str, *, headers: dict[str, str] | None = None
    ) -> None:
        """Queue an error response, e.g. `reply_error(529, "overloaded_error", "Overloaded")`."""
        self.reply(status, error_body(error_type, message), headers=headers)

    def reply_prompt_too_long(self, tokens: int = 210_000, maximum: int = 200_000) -> None:
        """Queue the API's 400 for a prompt over the model's context window."""
        self.reply_error(
            400, "invalid_request_error", f"prompt is too long: {tokens} tokens > {maximum} maximum"
        )

    def reset_connection(self) -> None:
        """Queue a dropped connection: the next request gets a TCP reset, no response."""
        self._queue(ScriptedReply(0, None, reset=True))

    def reply_stream_error(
        self, content: list[dict[str, Any]], error_type: str, message: str, **fields: Any
    ) -> None:
        """Queue a stream that starts (200) and then fails with an `error` event."""
        self._queue(
            ScriptedReply(
                200,
                message_body(content, **fields),
                stream_error={"type": error_type, "message": message},
            )
        )

    def reply_stream_cut(self, content: list[dict[str, Any]], **fields: Any) -> None:
        """Queue a stream that starts (200), sends its first block, then drops the connection."""
        self._queue(ScriptedReply(200, message_body(content, **fields), reset=True))

    def _queue(self, reply: ScriptedReply) -> None:
        with self._lock:
            self._replies.append(reply)

    # --- serving ---

    def record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def refusal(self, request: RecordedRequest) -> ScriptedReply | None:
        """The error the real API gives this request before generating anything, if any."""
        sent_key = request.headers.get("x-api-key") or request.headers.get(
            "authorization", ""
        ).removeprefix("Bearer ")
        if not sent_key or (self.api_key is not None and sent_key != self.api_key):
            return ScriptedReply(401, error_body("authentication_error", "invalid x-api-key"))
        if "anthropic-version" not in request.headers:
            return ScriptedReply(
                400, error_body("invalid_request_error", "anthropic-version: header is required")
            )
        if self.validate:
            try:
                validate_request(request.body)
            except InvalidRequest as exc:
                return ScriptedReply(400, error_body("invalid_request_error", str(exc)))
        return None

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

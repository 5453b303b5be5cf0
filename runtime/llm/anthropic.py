"""The Anthropic adapter: a `ModelRequest` over the official SDK's Messages API.

Requests are already in the Messages shape, so mapping them is mostly passing them through, plus
prompt-caching breakpoints and the extended-thinking switch. Responses keep the blocks the runtime
understands (text, tool_use, thinking, redacted_thinking) and the stop reason exactly as the API
gave it; the engine decides what each means. Every failure, whether the provider's, the network's
or a malformed answer, is a `ModelError` saying whether waiting can heal it (`transient`), how
long the provider asked us to wait (`retry_after`), the HTTP `status` and a stable `reason`.

Retries come in two layers. Within one attempt the SDK's own machinery retries transient failures
a few times (`AGENTOPS_MODEL_RETRIES`, default 2), honouring `retry-after`, `retry-after-ms` and
`x-should-retry`: a model request has no side effects, so repeating it is safe. A provider that
asks for a longer wait than `AGENTOPS_MODEL_RETRY_MAX_WAIT` is not waited for in-process: the
error goes to the engine, whose persisted backoff (the agent's `ModelRetry`) honours it without
holding a worker.
"""

from __future__ import annotations

import copy
import email.utils
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2
from django.conf import settings

from runtime.errors import ModelError, PromptTooLong
from runtime.llm import ModelRequest, ModelResponse

# In-process retries of one attempt, on top of the first request (the SDK's own default).
DEFAULT_RETRIES = 2
# Seconds one request may take: the SDK's own default, sized for non-streaming answers up to
# STREAMING_MAX_TOKENS. An explicit timeout also turns off the SDK's estimate below, which is
# why the adapter makes the streaming decision itself.
DEFAULT_TIMEOUT = 600.0
# The longest provider-requested wait spent asleep inside one attempt; a longer `retry-after`
# is handed to the persisted backoff instead of blocking a worker.
DEFAULT_RETRY_MAX_WAIT = 10.0
# The SDK refuses a non-streaming request whose expected duration, an hour per 128,000 output
# tokens, is over ten minutes: 128_000 * 600 / 3600 = 21,333 tokens. Above this the adapter
# streams and assembles the final message, so long outputs never hit that refusal nor an idle
# connection cut by a proxy.
STREAMING_MAX_TOKENS = 21_333
# Extended thinking's documented floor; the budget must also be below max_tokens.
MIN_THINKING_BUDGET = 1024
# The API accepts at most this many cache_control breakpoints in one request.
MAX_CACHE_BREAKPOINTS = 4

# The block types kept from a response. Others (server tool blocks, anything newer than this
# code) are dropped: the engine could not act on them, and we never ask for them.
_KEPT_BLOCK_TYPES = frozenset({"text", "tool_use", "thinking", "redacted_thinking"})
# Blocks the API does not let a request mark with cache_control.
_UNCACHEABLE_BLOCK_TYPES = frozenset({"thinking", "redacted_thinking"})
_EPHEMERAL = {"type": "ephemeral"}

# The provider's error type decides first: a stream can fail after its 200 status line, and
# then only the error event's type says what happened.
_ERROR_TYPES: dict[str, tuple[str, bool]] = {
    "rate_limit_error": ("rate_limited", True),
    "overloaded_error": ("overloaded", True),
    "api_error": ("server_error", True),
    "timeout_error": ("timeout", True),
    "invalid_request_error": ("invalid_request", False),
    "authentication_error": ("authentication", False),
    "permission_error": ("permission", False),
    "not_found_error": ("not_found", False),
    "request_too_large": ("request_too_large", False),
    "billing_error": ("billing", False),
}
_STATUSES: dict[int, tuple[str, bool]] = {
    400: ("invalid_request", False),
    401: ("authentication", False),
    402: ("billing", False),
    403: ("permission", False),
    404: ("not_found", False),
    408: ("timeout", True),
    409: ("conflict", True),
    413: ("request_too_large", False),
    429: ("rate_limited", True),
    529: ("overloaded", True),
}
# A 429 that no wait will heal: the organization's monthly spend limit.
_SPEND_LIMIT_CODE = "enforced_spend_limit_reached"
_PROMPT_TOO_LONG = "prompt is too long"

# Enough of a non-JSON error body to recognise it (an HTML page from a proxy, say) in a run's log.
_BODY_EXCERPT_CHARS = 200
_REDACTED = "[redacted]"


@dataclass(frozen=True)
class _ClientKey:
    """Everything that configures an SDK client; one client per distinct key per process."""

    api_key: str | None
    base_url: str | None
    max_retries: int
    retry_max_wait: float
    # The SDK resolves credentials and endpoints from ANTHROPIC_* variables when not passed.
    environment: tuple[tuple[str, str], ...]


class _SharedClients:
    """The SDK clients of this process, one per configuration; safe to use from any thread."""

    def __init__(self) -> None:
        self.clients: dict[_ClientKey, anthropic.Anthropic] = {}
        self.lock = threading.Lock()

    def forget_after_fork(self) -> None:
        # A forked worker (Celery prefork) must not share the parent's sockets, nor inherit a
        # lock another parent thread held at the fork: start afresh.
        self.clients = {}
        self.lock = threading.Lock()


_shared = _SharedClients()
os.register_at_fork(after_in_child=_shared.forget_after_fork)


def close_clients() -> None:
    """Close every shared SDK client of this process (at shutdown, or between tests)."""
    with _shared.lock:
        clients = list(_shared.clients.values())
        _shared.clients.clear()
    for client in clients:
        client.close()


class _LongWaitsLeaveTheAttempt(anthropic.Middleware):
    """Stops the SDK from sleeping in-process through a long provider-requested wait.

    Runs inside the SDK's retry loop, once per HTTP attempt. `x-should-retry: false` is the
    SDK's own documented override; the response then surfaces as the usual typed error, whose
    `retry-after` the persisted backoff honours.
    """

    def __init__(self, max_wait: float) -> None:
        self.max_wait = max_wait

    def handle(self, request: Any, call_next: Any) -> Any:
        response = call_next(request)
        http_response = response.http_response
        wait = retry_after_seconds(http_response.headers)
        if http_response.status_code >= 400 and wait is not None and wait > self.max_wait:
            http_response.headers["x-should-retry"] = "false"
        return response


class AnthropicModel:
    """A `Model` backed by the Anthropic Messages API, through the official `anthropic` SDK.

    `api_key` and `base_url` default to the SDK's own resolution (`ANTHROPIC_API_KEY`,
    `ANTHROPIC_BASE_URL`, ...). `max_retries` (in-process retries of one attempt), `timeout`
    (seconds per request, unless the request sets its own) and `retry_max_wait` default to the
    settings `AGENTOPS_MODEL_RETRIES`, `AGENTOPS_MODEL_TIMEOUT` and
    `AGENTOPS_MODEL_RETRY_MAX_WAIT`, read when a request is made. Constructing an adapter reads
    no environment and opens no connection; SDK clients are shared by every adapter of the
    process with the same configuration.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        retry_max_wait: float | None = None,
    ) -> None:
        if max_retries is not None and max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be more than 0 seconds")
        if retry_max_wait is not None and retry_max_wait < 0:
            raise ValueError("retry_max_wait must be 0 or more seconds")
        self._api_key = api_key
        self._base_url = base_url
        self._timeout = timeout
        self._max_retries = max_retries
        self._retry_max_wait = retry_max_wait

    def __repr__(self) -> str:
        # Spelled out so that no default repr can ever show the key.
        return (
            f"AnthropicModel(base_url={self._base_url!r}, timeout={self._timeout!r}, "
            f"max_retries={self._max_retries!r})"
        )

    @property
    def client(self) -> anthropic.Anthropic:
        """The process-wide SDK client for this configuration, built on first use."""
        key = self._client_key()
        with _shared.lock:
            client = _shared.clients.get(key)
            if client is None:
                client = self._build_client(key)
                _shared.clients[key] = client
            return client

    def complete(self, request: ModelRequest, *, operation_id: str) -> ModelResponse:
        """Send `request` to the Messages API; any failure is a `ModelError`.

        Transient failures are retried in-process (see the module docstring) before one
        `ModelError` reports the last of them. `operation_id` is not sent: the Messages API has
        no idempotency key, and a repeated attempt is the engine's to count.
        """
        params = request_params(request)
        timeout = request.timeout or self._default_timeout()
        client = self.client
        try:
            if request.max_tokens > STREAMING_MAX_TOKENS:
                with client.messages.stream(**params, timeout=timeout) as stream:
                    message: object = stream.get_final_message()
            else:
                message = client.messages.create(**params, timeout=timeout)
        except anthropic.AnthropicError as exc:
            raise self._scrubbed(_model_error(exc)) from self._safe_cause(exc)
        except httpx2.TransportError as exc:
            # The SDK wraps failures while it waits for a response, not while a stream is read.
            raise self._scrubbed(_broken_stream_error(exc)) from self._safe_cause(exc)
        except json.JSONDecodeError as exc:
            # The SDK decodes a 2xx body it was told is JSON and lets the decode error through.
            raise ModelError(
                "Anthropic API returned a response body that is not JSON", reason="invalid_output"
            ) from exc
        return ModelResponse.parse(_response_data(message, request))

    def _client_key(self) -> _ClientKey:
        retries = self._max_retries
        if retries is None:
            retries = int(getattr(settings, "AGENTOPS_MODEL_RETRIES", DEFAULT_RETRIES))
        max_wait = self._retry_max_wait
        if max_wait is None:
            max_wait = float(
                getattr(settings, "AGENTOPS_MODEL_RETRY_MAX_WAIT", DEFAULT_RETRY_MAX_WAIT)
            )
        environment = tuple(
            sorted(
                (name, value) for name, value in os.environ.items() if name.startswith("ANTHROPIC_")
            )
        )
        return _ClientKey(self._api_key, self._base_url, retries, max_wait, environment)

    def _default_timeout(self) -> float:
        if self._timeout is not None:
            return self._timeout
        return float(getattr(settings, "AGENTOPS_MODEL_TIMEOUT", DEFAULT_TIMEOUT))

    def _build_client(self, key: _ClientKey) -> anthropic.Anthropic:
        try:
            client = anthropic.Anthropic(
                api_key=key.api_key,
                base_url=key.base_url,
                max_retries=key.max_retries,
                middleware=[_LongWaitsLeaveTheAttempt(key.retry_max_wait)],
            )
        except anthropic.AnthropicError as exc:  # e.g. an unreadable credentials profile
            raise self._scrubbed(
                ModelError(
                    f"could not configure the Anthropic client: {exc}", reason="configuration"
                )
            ) from self._safe_cause(exc)
        has_provider = getattr(client, "credentials", None) is not None
        if client.api_key is None and client.auth_token is None and not has_provider:
            # Otherwise the SDK raises a TypeError at request time, which is no ModelError.
            raise ModelError(
                "no Anthropic credentials: pass api_key or set ANTHROPIC_API_KEY",
                reason="authentication",
            )
        return client

    def _secrets(self) -> list[str]:
        candidates = [self._api_key, os.environ.get("ANTHROPIC_API_KEY")]
        candidates.append(os.environ.get("ANTHROPIC_AUTH_TOKEN"))
        return [secret for secret in candidates if secret]

    def _scrubbed(self, error: ModelError) -> ModelError:
        # A provider or proxy may echo the request back in its error text; scrub the key from it.
        for secret in self._secrets():
            error.message = error.message.replace(secret, _REDACTED)
        error.args = (error.message,)
        return error

    def _safe_cause(self, exc: BaseException) -> BaseException | None:
        """`exc` as the ModelError's cause, unless its own text would show a secret in a log."""
        text = str(exc)
        return None if any(secret in text for secret in self._secrets()) else exc


def request_params(request: ModelRequest) -> dict[str, Any]:
    """The Messages API parameters for `request`, without touching the request's own data.

    Raises `ModelError` (permanent) for a thinking budget the API would refuse.
    """
    params: dict[str, Any] = {
        "model": request.model,
        "messages": request.messages,
        "max_tokens": request.max_tokens,
    }
    # Left out when empty, so the API applies its own defaults instead of judging "" or [].
    if request.system:
        params["system"] = request.system
    if request.tools:
        params["tools"] = [tool.model_dump() for tool in request.tools]
    if request.thinking_budget is not None:
        budget = request.thinking_budget
        if budget < MIN_THINKING_BUDGET or budget >= request.max_tokens:
            raise ModelError(
                f"thinking budget {budget} must be at least {MIN_THINKING_BUDGET} tokens and "
                f"less than max_tokens ({request.max_tokens})",
                reason="invalid_request",
            )
        params["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if request.cache:
        _add_cache_breakpoints(params)
    return params


def _add_cache_breakpoints(params: dict[str, Any]) -> None:
    """Mark the system prompt, the last tool and the end of the transcript as cacheable.

    The cache holds the prefix up to each breakpoint, in the order tools, system, messages, so
    these three cover the stable parts and the growing transcript. Breakpoints the caller set
    already count toward the API's limit of four; ours are added only while there is room.
    Only copies are marked: the request's messages stay as the engine stored them.
    """
    room = MAX_CACHE_BREAKPOINTS - _count_breakpoints(params)
    if room > 0 and isinstance(params.get("system"), str):
        params["system"] = [{"type": "text", "text": params["system"], "cache_control": _EPHEMERAL}]
        room -= 1
    tools = params.get("tools")
    if room > 0 and tools and "cache_control" not in tools[-1]:
        params["tools"] = [*tools[:-1], {**tools[-1], "cache_control": _EPHEMERAL}]
        room -= 1
    messages = params["messages"]
    if room <= 0 or not messages:
        return
    last = messages[-1]
    content = last.get("content")
    if isinstance(content, str):
        blocks: list[Any] = [{"type": "text", "text": content}] if content else []
    elif isinstance(content, list):
        blocks = list(content)
    else:
        return
    # The last block the API lets us mark: not a thinking block, not an empty text.
    for index in range(len(blocks) - 1, -1, -1):
        block = blocks[index]
        if not isinstance(block, dict) or block.get("type") in _UNCACHEABLE_BLOCK_TYPES:
            continue
        if block.get("type") == "text" and not block.get("text"):
            continue
        if "cache_control" in block:
            return
        blocks[index] = {**copy.deepcopy(block), "cache_control": _EPHEMERAL}
        params["messages"] = [*messages[:-1], {**last, "content": blocks}]
        return


def _count_breakpoints(value: object) -> int:
    if isinstance(value, dict):
        own = 1 if value.get("cache_control") else 0
        return own + sum(_count_breakpoints(item) for item in value.values())
    if isinstance(value, list):
        return sum(_count_breakpoints(item) for item in value)
    return 0


def _response_data(message: object, request: ModelRequest) -> dict[str, Any]:
    """The SDK's message as plain data, narrowed to what `ModelResponse` describes."""
    if not isinstance(message, anthropic.BaseModel):
        # A 2xx body that is not a JSON object (the SDK hands back text or a list as-is).
        raise ModelError(
            f"Anthropic API returned an unexpected response: {type(message).__name__}",
            reason="invalid_output",
        )
    # The SDK does not validate responses: an unknown block type comes back dressed as its
    # first union member (a TextBlock with no text), and a missing field is simply unset. Its
    # plain-data form is what the API actually sent, so filter and validate that instead;
    # warnings off because such mismatches are expected here, and judged by `parse`.
    raw = message.to_dict(mode="json", warnings=False)
    content = raw.get("content")
    if isinstance(content, list):
        content = [
            block
            for block in content
            if not isinstance(block, dict) or block.get("type") in _KEPT_BLOCK_TYPES
        ]
    data: dict[str, Any] = {
        "content": content,
        "stop_reason": raw.get("stop_reason"),
        "model": raw.get("model", request.model),
    }
    usage = raw.get("usage", {})
    if isinstance(usage, dict):
        # The API sends null for the cache counts of a request that used no cache.
        usage = {
            **usage,
            "cache_creation_input_tokens": usage.get("cache_creation_input_tokens") or 0,
            "cache_read_input_tokens": usage.get("cache_read_input_tokens") or 0,
        }
    data["usage"] = usage
    return data


def retry_after_seconds(headers: Any) -> float | None:
    """The provider's requested wait: `retry-after-ms`, else `retry-after` (seconds or a date)."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return max(0.0, float(milliseconds) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    date = email.utils.parsedate_tz(value)
    if date is None:
        return None
    return max(0.0, email.utils.mktime_tz(date) - time.time())


def _model_error(exc: anthropic.AnthropicError) -> ModelError:
    """The `ModelError` for an SDK error: transient or not, with the provider's wait."""
    message = _describe(exc)
    if isinstance(exc, anthropic.APIStatusError):
        error = _provider_error(exc.body)
        error_type = error.get("type")
        status = exc.status_code
        if isinstance(error_type, str) and error_type in _ERROR_TYPES:
            reason, transient = _ERROR_TYPES[error_type]
        elif status in _STATUSES:
            reason, transient = _STATUSES[status]
        elif status >= 500:
            reason, transient = "server_error", True
        else:
            reason, transient = "invalid_request", False
        detail = error.get("message")
        prompt_too_long = isinstance(detail, str) and _PROMPT_TOO_LONG in detail.lower()
        if reason == "invalid_request" and prompt_too_long:
            return PromptTooLong(message, status=status)
        details = error.get("details")
        if isinstance(details, dict) and details.get("error_code") == _SPEND_LIMIT_CODE:
            reason, transient = "spend_limit", False
        return ModelError(
            message,
            transient=transient,
            retry_after=retry_after_seconds(exc.response.headers) if transient else None,
            status=status,
            reason=reason,
        )
    if isinstance(exc, anthropic.APITimeoutError):
        return ModelError(message, transient=True, reason="timeout")
    if isinstance(exc, anthropic.APIConnectionError):
        return ModelError(message, transient=True, reason="connection")
    if isinstance(exc, anthropic.APIResponseValidationError):
        return ModelError(message, status=exc.status_code, reason="invalid_output")
    return ModelError(message, reason="client_error")


def _broken_stream_error(exc: httpx2.TransportError) -> ModelError:
    reason = "timeout" if isinstance(exc, httpx2.TimeoutException) else "connection"
    return ModelError(
        f"the Anthropic API stream broke off: {type(exc).__name__}: {exc}",
        transient=True,
        reason=reason,
    )


def _describe(exc: anthropic.AnthropicError) -> str:
    """A one-line account of an SDK error: status, the provider's error type and message."""
    if isinstance(exc, anthropic.APIStatusError):
        error = _provider_error(exc.body)
        parts = [f"Anthropic API returned HTTP {exc.status_code}"]
        error_type, error_message = error.get("type"), error.get("message")
        if isinstance(error_type, str) and error_type:
            parts.append(error_type)
        if isinstance(error_message, str) and error_message:
            parts.append(error_message)
        elif isinstance(exc.body, str) and exc.body.strip():
            parts.append(_excerpt(exc.body))
        text = ": ".join(parts)
        request_id = getattr(exc, "request_id", None)
        return f"{text} (request id {request_id})" if request_id else text
    if isinstance(exc, anthropic.APITimeoutError):
        return f"Anthropic API request timed out ({_target(exc)})"
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__
        reason = f": {type(cause).__name__}: {cause}" if cause is not None else ""
        return f"could not reach the Anthropic API ({_target(exc)}){reason}"
    if isinstance(exc, anthropic.APIResponseValidationError):
        return f"Anthropic API response failed validation (HTTP {exc.status_code}): {exc.message}"
    if isinstance(exc, anthropic.APIError):
        return f"Anthropic API error: {exc.message}"
    return f"Anthropic client error: {type(exc).__name__}: {exc}"


def _provider_error(body: object) -> dict[str, Any]:
    """The `error` object of an error body, `{"type": "error", "error": {...}}`, else `{}`."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            return error
    return {}


def _target(exc: anthropic.APIError) -> str:
    # Host and path only: a base URL may carry credentials in its user-info part.
    url = exc.request.url
    return f"{url.scheme}://{url.host}{f':{url.port}' if url.port else ''}{url.path}"


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= _BODY_EXCERPT_CHARS:
        return text
    return text[:_BODY_EXCERPT_CHARS] + "..."

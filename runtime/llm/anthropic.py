"""The Anthropic adapter: a `ModelRequest` over the official SDK's Messages API.

Requests are already in the Messages shape, so mapping them is mostly passing them through.
Responses are reduced to the blocks the runtime understands (text and tool_use) and validated by
`ModelResponse.parse`. Every failure, whether the provider's, the network's or a malformed answer,
is a `ModelError`, which the engine retries under the agent's `ModelRetry` and records; that is
why the SDK's own retries are turned off here, so no attempt goes uncounted.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import anthropic

from runtime.errors import ModelError
from runtime.llm import ModelRequest, ModelResponse

# The block types kept from a response. Others (thinking, redacted_thinking, server tool blocks,
# anything newer than this code) are dropped: the engine could not act on them, and we never ask
# for them (no extended thinking, no server tools), so nothing the API needs echoed back is lost.
_KEPT_BLOCK_TYPES = frozenset({"text", "tool_use"})

# Enough of a non-JSON error body to recognise it (an HTML page from a proxy, say) in a run's log.
_BODY_EXCERPT_CHARS = 200

_REDACTED = "[redacted]"


class AnthropicModel:
    """A `Model` backed by the Anthropic Messages API, through the official `anthropic` SDK.

    `api_key` and `base_url` default to the SDK's own resolution (`ANTHROPIC_API_KEY`,
    `ANTHROPIC_BASE_URL`, ...). The SDK client is built on first use, so constructing an
    `AnthropicModel` reads no environment and opens no connection. A `client` may be passed
    instead (then `api_key`, `base_url` and `timeout` do not apply); it is used with SDK retries
    forced off, like the one built here.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        client: anthropic.Anthropic | None = None,
    ) -> None:
        if client is not None and (api_key is not None or base_url is not None):
            raise ValueError("pass either a client or api_key/base_url, not both")
        self._api_key = api_key
        self._base_url = base_url
        self._timeout = timeout
        self._lock = threading.Lock()
        self._owns_client = client is None
        # The runtime persists and counts its own retries; an SDK retry would be invisible to it.
        if client is not None and client.max_retries != 0:
            client = client.with_options(max_retries=0)
        self._client = client

    def __repr__(self) -> str:
        # Spelled out so that no default repr can ever show the key.
        return f"AnthropicModel(base_url={self._base_url!r}, timeout={self._timeout!r})"

    def complete(self, request: ModelRequest, *, operation_id: str) -> ModelResponse:
        """Send `request` to the Messages API once; any failure is a `ModelError`.

        `operation_id` is not sent: the Messages API has no idempotency key, and a repeated
        call is the engine's to count, not the provider's to deduplicate.
        """
        client = self._get_client()
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
        try:
            message = client.messages.create(**params)
        except anthropic.AnthropicError as exc:
            raise self._model_error(_describe(exc)) from self._safe_cause(exc)
        except json.JSONDecodeError as exc:
            # The SDK decodes a 2xx body it was told is JSON and lets the decode error through.
            raise ModelError("Anthropic API returned a response body that is not JSON") from exc
        return ModelResponse.parse(self._response_data(message, request))

    def close(self) -> None:
        """Close the connections of a client this adapter built (a passed one is the caller's).

        A later `complete` builds a new client.
        """
        if not self._owns_client:
            return
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _get_client(self) -> anthropic.Anthropic:
        with self._lock:
            if self._client is None:
                try:
                    client = anthropic.Anthropic(
                        api_key=self._api_key,
                        base_url=self._base_url,
                        max_retries=0,
                        timeout=self._timeout,
                    )
                except anthropic.AnthropicError as exc:  # e.g. an unreadable credentials profile
                    raise self._model_error(
                        f"could not configure the Anthropic client: {exc}"
                    ) from self._safe_cause(exc)
                has_provider = getattr(client, "credentials", None) is not None  # newer SDKs
                if client.api_key is None and client.auth_token is None and not has_provider:
                    # Otherwise the SDK raises a TypeError at request time, which is no ModelError.
                    raise ModelError(
                        "no Anthropic credentials: pass api_key or set ANTHROPIC_API_KEY"
                    )
                self._client = client
            return self._client

    def _response_data(self, message: object, request: ModelRequest) -> dict[str, Any]:
        """The SDK's message as plain data, narrowed to what `ModelResponse` describes."""
        if not isinstance(message, anthropic.BaseModel):
            # A 2xx body that is not a JSON object (the SDK hands back text or a list as-is).
            raise ModelError(
                f"Anthropic API returned an unexpected response: {type(message).__name__}"
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
        if "usage" in raw:
            data["usage"] = raw["usage"]
        return data

    def _secrets(self) -> list[str]:
        client = self._client
        candidates = [self._api_key]
        if client is not None:
            candidates += [client.api_key, client.auth_token]
        return [secret for secret in candidates if secret]

    def _model_error(self, message: str) -> ModelError:
        # A provider or proxy may echo the request back in its error text; scrub the key from it.
        for secret in self._secrets():
            message = message.replace(secret, _REDACTED)
        return ModelError(message)

    def _safe_cause(self, exc: BaseException) -> BaseException | None:
        """`exc` as the ModelError's cause, unless its own text would show a secret in a log."""
        text = str(exc)
        return None if any(secret in text for secret in self._secrets()) else exc


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

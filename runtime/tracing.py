"""OpenTelemetry spans for run claims and for each model request and tool call.

Off until `configure` is given a tracer provider (agentops.integrations does so when
AGENTOPS_OTLP_ENDPOINT is set): until then every span helper yields a no-op handle without
touching OpenTelemetry. Model request spans carry the GenAI semantic-convention attributes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from runtime import keys

_tracer: trace.Tracer | None = None


def configure(provider: trace.TracerProvider | None) -> None:
    """Send spans to `provider`; None turns tracing off."""
    global _tracer  # noqa: PLW0603 - one switch for the whole process, set at start
    _tracer = provider.get_tracer("agentops.runtime") if provider is not None else None


def enabled() -> bool:
    return _tracer is not None


class SpanHandle:
    """What the engine tells a span after the call: the model's response, a tool's outcome."""

    def __init__(self, span: Span | None) -> None:
        self._span = span

    def model_response(self, response: Any) -> None:
        if self._span is None:
            return
        usage = response.usage
        self._span.set_attributes(
            {
                "gen_ai.response.model": response.model or "",
                "gen_ai.response.finish_reasons": [response.stop_reason or ""],
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
                "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
            }
        )

    def tool_outcome(self, is_error: bool) -> None:
        if self._span is not None and is_error:
            self._span.set_status(Status(StatusCode.ERROR, "the tool returned an error result"))


@contextmanager
def run_span(run: Any) -> Iterator[SpanHandle]:
    """One claim of a run, from the claim to the moment the worker lets go of it."""
    if _tracer is None:
        yield SpanHandle(None)
        return
    attributes = {
        "agentops.run.id": str(run.pk),
        "agentops.agent": run.agent,
        "agentops.agent.version": run.version,
        "agentops.run.fence": run.fence,
        "gen_ai.agent.name": run.agent,
    }
    # The engine ends a claim by raising its stop signal: that is not an error of the span.
    with _tracer.start_as_current_span(
        "agentops.run", attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as span:
        try:
            yield SpanHandle(span)
        finally:
            span.set_attribute("agentops.run.status", str(run.status))


@contextmanager
def model_span(run: Any, key: str, request: Any) -> Iterator[SpanHandle]:
    if _tracer is None:
        yield SpanHandle(None)
        return
    attributes = {
        "gen_ai.system": "anthropic",
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": request.model,
        "gen_ai.request.max_tokens": request.max_tokens,
        **_operation_attributes(run, key),
    }
    with _tracer.start_as_current_span(
        f"chat {request.model}", kind=trace.SpanKind.CLIENT, attributes=attributes
    ) as span:
        yield SpanHandle(span)


@contextmanager
def tool_span(run: Any, op: Any) -> Iterator[SpanHandle]:
    if _tracer is None:
        yield SpanHandle(None)
        return
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": op.name,
        "gen_ai.tool.call.id": _call_id(op.key),
        "agentops.recovery": op.policy,
        "agentops.attempt": op.attempts,
        **_operation_attributes(run, op.key),
    }
    with _tracer.start_as_current_span(f"execute_tool {op.name}", attributes=attributes) as span:
        yield SpanHandle(span)


def _operation_attributes(run: Any, key: str) -> dict[str, Any]:
    return {
        "agentops.run.id": str(run.pk),
        "agentops.operation.key": key,
        "agentops.operation.id": keys.operation_id(run.pk, key),
    }


def _call_id(key: str) -> str:
    parsed = keys.parse_key(key)
    return parsed.call_id if parsed else key

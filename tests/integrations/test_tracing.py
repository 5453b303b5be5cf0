"""Traces: a span per run claim and per operation, GenAI attributes on model requests; nothing
is traced until a tracer provider is configured."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from runtime import submit, tracing
from runtime.models import Operation
from runtime.testing import run_until_idle
from tests.conftest import make_agent
from tests.integrations.conftest import finish


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(provider)
    yield exporter
    tracing.configure(None)


def test_a_run_makes_claim_model_and_tool_spans(spans, approval_run):
    run, interaction = approval_run()
    finish(run, interaction)
    finished = spans.get_finished_spans()
    claims = [s for s in finished if s.name == "agentops.run"]
    assert len(claims) == 2  # until the approval, then after it
    assert [c.attributes["agentops.run.status"] for c in claims] == ["waiting", "completed"]
    assert all(c.attributes["agentops.run.id"] == str(run.pk) for c in claims)
    assert all(c.status.status_code != StatusCode.ERROR for c in claims)

    models = [s for s in finished if s.name == "chat claude-test"]
    model_ops = Operation.objects.filter(run=run, kind="model").order_by("key")
    assert len(models) == model_ops.count() == 2
    first = models[0].attributes
    usage = model_ops[0].usage
    assert first["gen_ai.system"] == "anthropic"
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.request.model"] == "claude-test"
    assert first["gen_ai.usage.input_tokens"] == usage["input_tokens"]
    assert first["gen_ai.usage.output_tokens"] == usage["output_tokens"]
    assert first["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert first["agentops.operation.id"] == f"{run.pk}:step-1/model"

    (tool,) = [s for s in finished if s.name == "execute_tool refund"]
    assert tool.attributes["gen_ai.tool.name"] == "refund"
    assert tool.attributes["gen_ai.tool.call.id"] == "toolu_01_0"
    assert tool.attributes["agentops.recovery"] == "manual"
    # Spans nest: the operations of a claim are its children.
    assert tool.parent.span_id == claims[1].context.span_id


def test_a_model_mistake_runs_no_tool_and_makes_no_tool_span(spans, define):
    from tests.conftest import one_call

    define(make_agent(one_call("get_order", {"order_id": 7}), name="typo"))
    run_until_idle(submit("typo", "look", actor="alice").pk)
    # A model mistake (wrong argument type) runs nothing: no tool span at all.
    assert not [s for s in spans.get_finished_spans() if s.name.startswith("execute_tool")]


def test_a_model_error_is_an_error_span(spans, define):
    define(make_agent([RuntimeError("provider down")], name="flaky"))
    run_until_idle(submit("flaky", "hi", actor="alice").pk)
    (model,) = [s for s in spans.get_finished_spans() if s.name.startswith("chat")]
    assert model.status.status_code == StatusCode.ERROR


def test_turning_tracing_off_stops_the_spans(spans, approval_run):
    approval_run("traced")
    traced = len(spans.get_finished_spans())
    assert traced > 0
    tracing.configure(None)
    approval_run("not traced")
    assert len(spans.get_finished_spans()) == traced


def test_tracing_is_off_by_default(settings):
    from agentops.integrations import tracing_setup

    settings.AGENTOPS_OTLP_ENDPOINT = ""
    tracing.configure(None)
    tracing_setup.configure_from_settings()
    assert not tracing.enabled()

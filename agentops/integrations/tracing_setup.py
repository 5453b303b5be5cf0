"""Turn the runtime's traces on when AGENTOPS_OTLP_ENDPOINT is set (OTLP over HTTP)."""

from __future__ import annotations

from django.conf import settings

from runtime import tracing


def configure_from_settings() -> None:
    endpoint = settings.AGENTOPS_OTLP_ENDPOINT
    if not endpoint:
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(
        resource=Resource.create({"service.name": settings.AGENTOPS_OTEL_SERVICE_NAME})
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    tracing.configure(provider)

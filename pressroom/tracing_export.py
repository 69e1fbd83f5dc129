"""Tracing turned on: OpenTelemetry's SDK, its OTLP/HTTP exporter and Temporal's tracing
interceptor, loaded only when the OTEL_* variables ask for traces (pressroom/tracing.py says which)."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from temporalio.contrib.opentelemetry import TracingInterceptor

from pressroom import tracing


def configure_from_environment() -> bool:
    """Export traces over OTLP/HTTP when the OTEL_* variables ask for it; answers whether they do."""
    if tracing.enabled():
        return True
    if not tracing.wanted():
        return False
    provider = configure(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)  # for any library instrumentation an operator adds
    return True


def configure(processor) -> Any:
    """Record spans through `processor` (tests pass a SimpleSpanProcessor of an in-memory exporter).

    Returns the TracerProvider; it flushes at interpreter exit.
    """
    resource = Resource.create({})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "pressroom"}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("pressroom")
    tracing.use(tracer, [TracingInterceptor(tracer)])
    return provider

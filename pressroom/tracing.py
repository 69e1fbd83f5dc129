"""OpenTelemetry traces: one trace follows a job from the command that started it to Mailgun.

Temporal's TracingInterceptor carries the trace through workflows and activities (in their
headers); Pressroom adds the spans Temporal cannot see: the command itself, each Mailgun request
and each PostgreSQL statement, and the outbox carries the context of the transaction that
enqueued an entry to the workflow that delivers it.

Configured by the standard variables: tracing is on when `OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (or `OTEL_TRACES_EXPORTER=otlp`), exported over
OTLP/HTTP, and off otherwise or with `OTEL_SDK_DISABLED=true`. `OTEL_SERVICE_NAME`,
`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_HEADERS` and the sampler variables apply as
everywhere else. Span attributes carry ids, never a member's address or a key.

This module needs only OpenTelemetry's API; the SDK and the exporter (pressroom/tracing_export.py)
are loaded only when tracing is on, so a command with tracing off never pays for them.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import asyncpg
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import get_global_textmap

_tracer: trace.Tracer | None = None  # set by use(); None: tracing is off
_interceptors: list = []


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Do the OTEL_* variables ask for traces?"""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters == "none":
        return False
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or "otlp" in exporters.split(","))


def use(tracer: trace.Tracer, interceptors: list) -> None:
    """Tracing on: spans go to `tracer`, and Temporal clients carry `interceptors`
    (pressroom/tracing_export.py makes both when the OTEL_* variables ask for traces)."""
    global _tracer, _interceptors
    _tracer, _interceptors = tracer, interceptors


def disable() -> None:
    global _tracer, _interceptors
    _tracer, _interceptors = None, []


def enabled() -> bool:
    return _tracer is not None


def interceptors() -> list:
    """The Temporal client interceptors: the tracing interceptor when tracing is on (a worker built
    on the client inherits it)."""
    return list(_interceptors)


@contextmanager
def span(name: str, attributes: Mapping[str, Any] | None = None,
         kind: trace.SpanKind = trace.SpanKind.INTERNAL) -> Iterator[trace.Span]:
    """A span around a block; an exception marks it failed (its type only: messages may hold data)."""
    if _tracer is None:
        yield trace.INVALID_SPAN
        return
    with _tracer.start_as_current_span(name, attributes=dict(attributes or {}), kind=kind,
                                       record_exception=False, set_status_on_exception=False) as current:
        try:
            yield current
        except BaseException as error:
            current.set_status(trace.Status(trace.StatusCode.ERROR, type(error).__name__))
            raise


def traced(name: str, *ids: str) -> Callable:
    """Run an async function (a command) in a root span named `name`, with the named arguments
    (ids only) as `pressroom.<arg>` attributes."""
    def decorate(function: Callable) -> Callable:
        signature = inspect.signature(function)

        @functools.wraps(function)
        async def run(*args: Any, **kwargs: Any) -> Any:
            if _tracer is None:
                return await function(*args, **kwargs)
            bound = signature.bind_partial(*args, **kwargs).arguments
            attributes = {f"pressroom.{key}": str(bound[key]) for key in ids if bound.get(key) is not None}
            with span(name, attributes, kind=trace.SpanKind.CLIENT):
                return await function(*args, **kwargs)
        return run
    return decorate


def annotate(**ids: Any) -> None:
    """Add ids learnt along the way (a new member's id) to the current span."""
    current = trace.get_current_span()
    for key, value in ids.items():
        if value is not None:
            current.set_attribute(f"pressroom.{key}", str(value))


def current_context_carrier() -> dict[str, str]:
    """The current trace context as W3C headers ({} when there is none), to store beside a row."""
    if _tracer is None:
        return {}
    carrier: dict[str, str] = {}
    get_global_textmap().inject(carrier)
    return carrier


@contextmanager
def continued_from(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """Make a stored trace context current, so the spans of the block continue that trace; without
    one, the block starts a trace of its own rather than joining whatever is current."""
    if _tracer is None:
        yield
        return
    context = get_global_textmap().extract(dict(carrier)) if carrier else otel_context.Context()
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


def _statement_attributes(query: str) -> dict[str, str]:
    words = query.split(None, 1)
    # The parameterised text: values (addresses among them) travel as parameters, never in it.
    return {"db.system.name": "postgresql", "db.operation.name": words[0].upper() if words else "",
            "db.query.text": " ".join(query.split())[:300]}


def traced_connection_class():
    """An asyncpg Connection whose statements are spans, for pools made while tracing is on."""
    class TracedConnection(asyncpg.Connection):
        async def execute(self, query: str, *args: Any, **kwargs: Any):
            if args:  # a prepared statement: _execute makes its span
                return await super().execute(query, *args, **kwargs)
            with span(f"postgres {query.split(None, 1)[0].upper()}", _statement_attributes(query),
                      kind=trace.SpanKind.CLIENT):
                return await super().execute(query, *args, **kwargs)

        async def executemany(self, command: str, args: Any, **kwargs: Any):
            with span(f"postgres {command.split(None, 1)[0].upper()}", _statement_attributes(command),
                      kind=trace.SpanKind.CLIENT):
                return await super().executemany(command, args, **kwargs)

        async def _execute(self, query: str, args: Any, limit: int, timeout: Any, **kwargs: Any):
            # fetch, fetchrow and fetchval all come through here.
            with span(f"postgres {query.split(None, 1)[0].upper()}", _statement_attributes(query),
                      kind=trace.SpanKind.CLIENT):
                return await super()._execute(query, args, limit, timeout, **kwargs)

        async def copy_records_to_table(self, table_name: str, **kwargs: Any):
            with span("postgres COPY", {"db.system.name": "postgresql", "db.operation.name": "COPY",
                                        "db.collection.name": table_name}, kind=trace.SpanKind.CLIENT):
                return await super().copy_records_to_table(table_name, **kwargs)

    return TracedConnection

"""Log lines hold no address and no key, in any encoding, and workflow lines survive the sandbox.

The mask is checked on the formatted record, tracebacks included; the sandbox test runs a real,
sandboxed workflow on Temporal's server in both formats, with tracing on and off.
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from urllib.parse import quote, quote_plus

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.worker import Worker

from pressroom import logs, tracing, tracing_export
from pressroom.temporal import data_converter
from tests.operations.logging_workflow import LoggingWorkflow

KEY = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0"
ADDRESSES = ["bob@example.com", "bob+news@example.com", '"john doe"@example.com', "o.brien@xn--bcher-kva.example",
             "jürgen@bücher.example", "x@localhost"]


@pytest.fixture
def root_logging():
    """logs.configure replaces the root handlers; put the test runner's back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def formatted(formatter: logging.Formatter, message: str, *args: object, exc: BaseException | None = None) -> str:
    record = logging.LogRecord("pressroom.test", logging.WARNING, __file__, 1, message, args,
                               (type(exc), exc, exc.__traceback__) if exc else None)
    return formatter.format(record)


def encodings(value: str) -> list[str]:
    """The forms a value may take in a URL, a header or a token."""
    raw = value.encode()
    return [value, quote(value), quote(value, safe=""), quote_plus(value), quote(quote(value, safe=""), safe=""),
            base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode().rstrip("=")]


@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.parametrize("address", ADDRESSES)
def test_no_address_in_any_encoding_in_message_or_traceback(log_format, address):
    formatter = logs.FORMATTERS[log_format]([KEY], tracebacks=True)  # as PRESSROOM_DEBUG=1 prints them
    for form in encodings(address):
        try:
            raise ValueError(f"refused {form} at https://api.example/v3/d/events?recipient={form}&limit=300")
        except ValueError as error:
            line = formatted(formatter, "looked up %s in %s", form, f"/v3/d/events/{form}", exc=error)
        assert address not in line and form not in line, line
        assert "Traceback" in line and "ValueError" in line  # the traceback stays, masked
        if log_format == "json":
            assert json.loads(line)["exception"]  # still one valid JSON object


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_no_key_in_any_encoding(log_format):
    formatter = logs.FORMATTERS[log_format]([KEY])
    basic = base64.b64encode(f"api:{KEY}".encode()).decode()
    for form in [*encodings(KEY), basic, f"Basic {basic}"]:
        line = formatted(formatter, "sent with %s", form)
        assert KEY not in line and form not in line and basic not in line, line


def test_a_mailgun_page_token_that_decodes_to_an_address_is_masked():
    state = json.dumps({"q": [1.0, None, True, 300, "accepted", None, "bob@example.com"], "a": None})
    token = base64.urlsafe_b64encode(state.encode()).decode().rstrip("=")
    line = logs.mask(f"GET https://api.mailgun.net/v3/mg.example.com/events/{token}")
    assert token not in line and line.endswith("/events/<encoded>")


def test_ordinary_words_ids_and_times_stay_readable():
    text = ("batch 3 of newsletter-e1 sent: SendNewsletterWorkflow run 0190f5c2-7b1e-7c3a-9f00-2b6c1d8e4a10 "
            "at 2026-11-25T15:38:47+0000, 1000 recipients, Mailgun id 20261125153847.1.ABCDEF@mg.example.com")
    assert logs.mask(text) == text.replace("20261125153847.1.ABCDEF@mg.example.com", "<address>")


def test_library_lines_wait_for_warning_unless_asked(root_logging, capsys):
    logs.configure(level="INFO")
    logging.getLogger("httpx").info("HTTP Request: GET https://api.mailgun.net/v3/d/events?limit=300")
    logging.getLogger("httpx").warning("a library warning")
    logging.getLogger("pressroom.worker").info("a pressroom line")
    logs.configure(level="INFO", library_level="DEBUG")
    logging.getLogger("httpx").info("now asked for")
    err = capsys.readouterr().err
    assert "HTTP Request" not in err
    assert "a library warning" in err and "a pressroom line" in err and "now asked for" in err


@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_workflow_log_lines_survive_the_sandbox(root_logging, capsys, time_skipping_env, log_format, traced):
    if traced:
        tracing_export.configure(SimpleSpanProcessor(InMemorySpanExporter()))
    try:
        logs.configure(secrets=[KEY], log_format=log_format)
        client = await Client.connect(time_skipping_env.client.service_client.config.target_host,
                                      data_converter=data_converter(), interceptors=tracing.interceptors())
        queue = f"logs-{uuid.uuid4().hex[:8]}"
        async with Worker(client, task_queue=queue, workflows=[LoggingWorkflow]):
            await client.execute_workflow(LoggingWorkflow.run, "bob@example.com", id=f"logs-{queue}",
                                          task_queue=queue)
    finally:
        tracing.disable()
    err = capsys.readouterr().err
    assert "Logging error" not in err and "RestrictedWorkflowAccessError" not in err, err
    lines = [line for line in err.splitlines() if "a workflow line for" in line]
    assert len(lines) == 1, err
    assert "bob@example.com" not in lines[0] and "a workflow line for <address>" in lines[0]
    fields = json.loads(lines[0]) if log_format == "json" else dict(
        part.split("=", 1) for part in lines[0].split() if "=" in part)
    assert fields["workflow"] == "LoggingWorkflow" and fields["workflow_id"] == f"logs-{queue}"
    assert ("trace_id" in fields) == traced

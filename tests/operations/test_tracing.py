"""Traces: one connected trace per job, from the command to each Mailgun request, with ids only.

Spans are collected in memory; everything else is real: the Temporal dev server, PostgreSQL, the
Mailgun simulator over HTTP, a worker built on a client that carries the tracing interceptor.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from operations.members import add_member
from operations.newsletter import start_newsletter
from operations.outbox import ensure_relay
from operations.posts import schedule_post
from pressroom import tracing, tracing_export
from pressroom.temporal import connect
from tests.conftest import SIMULATOR_KEY, make_settings
from tests.newsletter.conftest import seed_email
from tests.newsletter.test_failures import wait_until
from tests.outbox.test_outbox import WELCOME, settled
from worker import running_worker
from workflows.newsletter import SendNewsletterWorkflow
from workflows.newsletter_models import newsletter_workflow_id
from workflows.outbox import RELAY_WORKFLOW_ID
from workflows.posts import PublishPostWorkflow

ADDRESS = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


@pytest.fixture
def spans():
    """Tracing on for this test, into memory; off again afterwards."""
    exporter = InMemorySpanExporter()
    tracing_export.configure(SimpleSpanProcessor(exporter))
    yield exporter
    tracing.disable()


@pytest.fixture
async def traced_worker(spans, dev_env, postgres_url, mailgun, db):
    """A client with the tracing interceptor (as `connect` makes it) and a worker built on it."""
    address = dev_env.client.service_client.config.target_host
    settings = make_settings(postgres_url, mailgun, temporal_address=address, batch_size=1000,
                             publish_lead_seconds=0.2, outbox_poll_interval_seconds=0.2)
    client = await connect(settings)
    async with running_worker(client, settings):
        yield client, settings


def trace_of(exporter: InMemorySpanExporter, root_name: str, **ids: str):
    """The root span named `root_name` with these ids, and every span of its trace."""
    finished = exporter.get_finished_spans()
    roots = [s for s in finished if s.name == root_name
             and all(s.attributes.get(f"pressroom.{k}") == v for k, v in ids.items())]
    assert len(roots) == 1, [s.name for s in finished]
    root = roots[0]
    return root, [s for s in finished if s.context.trace_id == root.context.trace_id]


def assert_connected(root, trace) -> None:
    """One tree: every span but the root has its parent in the trace."""
    ids = {s.context.span_id for s in trace}
    assert root.parent is None
    orphans = [s.name for s in trace if s is not root and (s.parent is None or s.parent.span_id not in ids)]
    assert not orphans, orphans


def children(trace, parent, name: str) -> list:
    return [s for s in trace if s.parent and s.parent.span_id == parent.context.span_id and s.name == name]


def named(trace, name: str) -> list:
    return [s for s in trace if s.name == name]


def assert_no_personal_data(exporter: InMemorySpanExporter) -> None:
    for span in exporter.get_finished_spans():
        for key, value in dict(span.attributes or {}).items():
            text = str(value)
            assert not ADDRESS.search(text), (span.name, key, text)
            assert SIMULATOR_KEY not in text, (span.name, key)
        assert not ADDRESS.search(span.name)


async def test_a_send_is_one_trace_from_the_command_to_each_mailgun_request(traced_worker, spans, db, mailgun):
    client, settings = traced_worker
    seeded = await seed_email(db, members=2500)  # three batches of at most 1,000
    started = await start_newsletter(seeded.email_id, client=client, settings=settings)
    outcome = await client.get_workflow_handle_for(SendNewsletterWorkflow.run, started.workflow_id).result()
    assert outcome.status == "submitted"

    root, trace = trace_of(spans, "pressroom newsletter send", email_id=seeded.email_id)
    assert_connected(root, trace)
    [start] = children(trace, root, "StartWorkflow:SendNewsletterWorkflow")
    assert start.attributes["temporalWorkflowID"] == newsletter_workflow_id(seeded.email_id)
    assert children(trace, start, "RunWorkflow:SendNewsletterWorkflow")
    batches = named(trace, "RunActivity:send_batch")
    assert len(batches) == 3 == len(mailgun.messages)
    for batch in batches:
        [request] = children(trace, batch, "Mailgun POST")
        assert request.attributes["http.response.status_code"] == 200
        assert request.attributes["mailgun.request"].startswith("batch of ")
    # The database work is in the same trace, under the activities that do it.
    statements = [s for s in trace if s.name.startswith("postgres ")]
    assert any(s.parent.span_id in {b.context.span_id for b in batches} for s in statements)
    assert named(trace, "RunActivity:lock_email") and named(trace, "RunActivity:finish_email")
    assert_no_personal_data(spans)
    print(f"\nsend trace: {len(trace)} spans, {len(batches)} batches, {len(statements)} statements")


async def test_an_outbox_entry_is_one_trace_from_enqueue_to_the_welcome_request(traced_worker, spans, db, mailgun):
    client, settings = traced_worker
    await db.execute(WELCOME)
    await ensure_relay(client, settings)
    try:
        added = await add_member("traced.reader@example.com", "Traced Reader", welcome=True, settings=settings)
        await settled(db, added.welcome_key)
        assert await client.get_workflow_handle(f"outbox-{added.welcome_key}").result() == "succeeded"
        # The welcome automation's run goes on after the delivery, in the same trace: let it end first.
        runs = await db.fetch("SELECT idempotency_key FROM automation_runs WHERE member_id = $1", added.member_id)
        assert runs
        for run in runs:
            await client.get_workflow_handle(run["idempotency_key"]).result()
    finally:
        await client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{settings.task_queue}").terminate()

    root, trace = trace_of(spans, "pressroom members add", member_id=added.member_id)
    assert_connected(root, trace)
    assert any(s.attributes.get("db.operation.name") == "INSERT" and "outbox" in s.attributes["db.query.text"]
               for s in children(trace, root, "postgres INSERT"))
    [start] = named(trace, "StartWorkflow:DeliverOutboxEntryWorkflow")
    assert start.attributes["temporalWorkflowID"] == f"outbox-{added.welcome_key}"
    [handle] = named(trace, "RunActivity:handle_entry")
    [request] = children(trace, handle, "Mailgun POST")
    assert request.attributes["http.response.status_code"] == 200
    # The handler's activity records the entry: the ledger's statement is under it.
    assert any(s.name.startswith("postgres ") and s.parent is not None and s.parent.span_id == handle.context.span_id
               and "idempotency_ledger" in s.attributes.get("db.query.text", "") for s in trace)
    assert len(mailgun.messages) == 1
    assert_no_personal_data(spans)


async def test_a_publication_is_one_trace_from_the_command_to_its_newsletter(traced_worker, spans, db, mailgun):
    client, settings = traced_worker
    seeded = await seed_email(db, members=1500, post_status="draft")
    at = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    await schedule_post(seeded.post_id, at, client=client, settings=settings)
    outcome = await client.get_workflow_handle_for(PublishPostWorkflow.run, f"post-publish-{seeded.post_id}").result()
    assert outcome.status == "published"
    sent = await client.get_workflow_handle_for(SendNewsletterWorkflow.run,
                                                newsletter_workflow_id(seeded.email_id)).result()
    assert sent.status == "submitted"

    async def mailgun_spans_ended() -> bool:
        return len(named(trace_of(spans, "pressroom posts schedule", post_id=seeded.post_id)[1], "Mailgun POST")) == 2
    await wait_until(mailgun_spans_ended, 10)

    root, trace = trace_of(spans, "pressroom posts schedule", post_id=seeded.post_id)
    assert_connected(root, trace)
    [publish] = named(trace, "RunActivity:publish_post")
    assert any(s.attributes.get("db.operation.name") == "WITH" for s in children(trace, publish, "postgres WITH"))
    assert named(trace, "StartChildWorkflow:SendNewsletterWorkflow")
    assert named(trace, "RunWorkflow:SendNewsletterWorkflow")
    for batch in named(trace, "RunActivity:send_batch"):
        assert children(trace, batch, "Mailgun POST")
    assert_no_personal_data(spans)


def test_tracing_is_off_unless_the_otel_variables_ask_for_it():
    assert not tracing.wanted({})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "otlp"})
    assert not tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"})
    assert not tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"})
    assert tracing.interceptors() == [] and not tracing.enabled()


class Collector:
    """An OTLP/HTTP trace receiver on a real port: what a collector would get from our processes."""

    def __init__(self) -> None:
        self.spans: list[dict] = []  # {name, trace_id, span_id, parent, attributes, service}

    async def receive(self, request):
        from aiohttp import web
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        export = ExportTraceServiceRequest.FromString(await request.read())
        for resource_spans in export.resource_spans:
            service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}.get("service.name")
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append({
                        "name": span.name, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                        "parent": span.parent_span_id.hex() or None, "service": service,
                        "attributes": {a.key: str(getattr(a.value, a.value.WhichOneof("value")))
                                       for a in span.attributes}})
        return web.Response(body=b"", content_type="application/x-protobuf")


@pytest.mark.usefixtures("schedules_removed_after")
async def test_the_otel_variables_export_one_trace_across_the_command_and_a_worker_process(
        dev_env, settings, db, mailgun):
    """Two real processes, configured only by OTEL_* variables, report to one OTLP endpoint."""
    import asyncio
    import signal

    from aiohttp import web

    from devstack.servers import free_port
    from tests.operations.test_waiting import cli, cli_env
    from tests.operations.test_worker_stop import read_log_until, start_worker

    collector = Collector()
    app = web.Application()
    app.router.add_post("/v1/traces", collector.receive)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_BSP_SCHEDULE_DELAY": "200"}
    seeded = await seed_email(db, members=1500)
    worker = start_worker(settings, dev_env, **otel)
    try:
        await read_log_until(worker, "worker started")
        code, _out, err = await cli("newsletter", "send", seeded.email_id, "--wait", env=cli_env(settings, dev_env,
                                                                                                **otel))
        assert code == 0, err

        def trace() -> list[dict]:
            roots = [s for s in collector.spans if s["name"] == "pressroom newsletter send"]
            return [s for s in collector.spans if roots and s["trace_id"] == roots[0]["trace_id"]]

        async def batches_reported() -> bool:
            return len([s for s in trace() if s["name"] == "Mailgun POST"]) == 2
        await wait_until(batches_reported, 30)
    finally:
        worker.send_signal(signal.SIGTERM)
        await asyncio.get_running_loop().run_in_executor(None, worker.wait)
        await runner.cleanup()
    spans = trace()
    ids = {s["span_id"] for s in spans}
    [root] = [s for s in spans if s["name"] == "pressroom newsletter send"]
    assert root["parent"] is None and root["attributes"]["pressroom.email_id"] == seeded.email_id
    assert all(s["parent"] in ids for s in spans if s is not root), [s["name"] for s in spans if s["parent"] not in ids]
    assert {s["service"] for s in spans} == {"pressroom"}
    assert len([s for s in spans if s["name"] == "RunActivity:send_batch"]) == 2
    for span in collector.spans:
        assert not any(ADDRESS.search(value) or SIMULATOR_KEY in value for value in span["attributes"].values())

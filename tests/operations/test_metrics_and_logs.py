"""The worker's Prometheus endpoint and its log lines: run details in fields, no address, no key."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

import httpx
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from activities.metrics import Instruments
from devstack.servers import free_port
from pressroom.logs import JsonFormatter, RunFormatter
from pressroom.settings import load_settings
from pressroom.temporal import data_converter
from worker import metrics_runtime


class CountingActivities:
    """Two activity types sharing one Instruments, as the activities classes do."""

    def __init__(self) -> None:
        self.metrics = Instruments()

    @activity.defn
    async def count_a_send(self) -> None:
        self.metrics.counter("pressroom_test_sends", "sends counted by the test").add(1)
        activity.logger.info("sent to bob@example.com with key key-sekret")

    @activity.defn
    async def count_a_resend(self) -> None:
        self.metrics.counter("pressroom_test_sends", "sends counted by the test").add(1)


@workflow.defn(sandboxed=False)  # a test-only workflow; this module imports httpx
class CountingWorkflow:
    @workflow.run
    async def run(self) -> None:
        for _ in range(2):
            await workflow.execute_activity_method(CountingActivities.count_a_send,
                                                   start_to_close_timeout=timedelta(seconds=10))
        await workflow.execute_activity_method(CountingActivities.count_a_resend,
                                               start_to_close_timeout=timedelta(seconds=10))


def _sends(text: str, activity_type: str) -> float:
    """The pressroom_test_sends value labelled with this activity type, from Prometheus' text format."""
    for line in text.splitlines():
        if line.startswith("pressroom_test_sends{") and f'activity_type="{activity_type}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no pressroom_test_sends for {activity_type} in the metrics")


async def test_metrics_endpoint_serves_sdk_and_pressroom_metrics(dev_env):
    port = free_port()
    runtime = metrics_runtime(load_settings(metrics_port=port))
    client = await Client.connect(dev_env.client.service_client.config.target_host, runtime=runtime,
                                  data_converter=data_converter())
    queue = f"metrics-{uuid.uuid4().hex[:8]}"
    counting = CountingActivities()
    async with Worker(client, task_queue=queue, workflows=[CountingWorkflow],
                      activities=[counting.count_a_send, counting.count_a_resend]):
        await client.execute_workflow(CountingWorkflow.run, id=f"metrics-{queue}", task_queue=queue)
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    assert "temporal_workflow_completed" in text
    # One instrument per activity type, made once and reused: each carries its own type's label.
    assert (_sends(text, "count_a_send"), _sends(text, "count_a_resend")) == (2, 1)


def test_metrics_are_off_without_a_port():
    assert metrics_runtime(load_settings()) is None


def test_log_lines_carry_run_fields_and_hide_addresses_and_secrets():
    record = logging.LogRecord("pressroom.activities", logging.INFO, __file__, 1,
                               "sent to %s with key %s", ("bob@example.com", "key-sekret"), None)
    record.temporal_activity = {"workflow_id": "newsletter-e1", "run_id": "r1", "activity_type": "send_batch",
                                "attempt": 2}
    line = RunFormatter(["key-sekret"]).format(record)
    assert "bob@example.com" not in line and "key-sekret" not in line
    assert "sent to <address> with key ***" in line
    assert line.endswith("workflow_id=newsletter-e1 run_id=r1 activity=send_batch attempt=2")


def test_json_log_lines_carry_the_same_fields_and_the_same_redaction():
    import json

    record = logging.LogRecord("pressroom.activities", logging.WARNING, __file__, 1,
                               "sent to %s with key %s", ("bob@example.com", "key-sekret"), None)
    record.temporal_activity = {"workflow_id": "newsletter-e1", "run_id": "r1", "activity_type": "send_batch",
                                "attempt": 2, "workflow_type": "SendNewsletterWorkflow"}
    line = JsonFormatter(["key-sekret"]).format(record)
    assert "\n" not in line and "bob@example.com" not in line and "key-sekret" not in line
    entry = json.loads(line)
    assert entry.pop("time")
    assert entry == {"level": "WARNING", "logger": "pressroom.activities", "message": "sent to <address> with key ***",
                     "workflow": "SendNewsletterWorkflow", "workflow_id": "newsletter-e1", "run_id": "r1",
                     "activity": "send_batch", "attempt": 2}
    # The text format carries the very same fields.
    text = RunFormatter(["key-sekret"]).format(record)
    assert text.endswith("workflow=SendNewsletterWorkflow workflow_id=newsletter-e1 run_id=r1 activity=send_batch "
                         "attempt=2")


def test_the_log_format_and_levels_are_settings():
    assert load_settings().log_format == "text"
    assert load_settings(log_format="json").log_format == "json"
    assert (load_settings().log_level, load_settings().library_log_level) == ("INFO", "WARNING")
    assert load_settings(library_log_level="debug").library_log_level == "DEBUG"

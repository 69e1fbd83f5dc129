"""SIGTERM: an idle worker stops at once; a worker with a batch in flight lets it finish first.

A real `pressroom worker` process (JSON logs on, so its lines are read as data) against the
Temporal dev server, PostgreSQL and the simulator.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.newsletter.conftest import seed_email
from tests.newsletter.test_failures import wait_until
from workflows.newsletter import SendNewsletterWorkflow
from workflows.newsletter_models import newsletter_workflow_id

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
GRACE_SECONDS = 20  # worker.build_worker's graceful_shutdown_timeout


def start_worker(settings, dev_env, **extra_env: str) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": settings.database_url,
           "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
           "PRESSROOM_TASK_QUEUE": settings.task_queue, "MAILGUN_BASE_URL": settings.mailgun_base_url,
           "MAILGUN_API_KEY": settings.mailgun_api_key.get_secret_value(), "MAILGUN_DOMAIN": settings.mailgun_domain,
           "PRESSROOM_MEMBERS_LINK_SECRET": settings.members_link_secret.get_secret_value(),
           "PRESSROOM_LOG_FORMAT": "json", **extra_env}
    return subprocess.Popen([sys.executable, "-m", "starter", "worker"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


async def read_log_until(worker: subprocess.Popen, message: str, timeout: float = 120) -> list[dict]:
    """JSON log entries up to and including the first whose message starts with `message`."""
    loop = asyncio.get_running_loop()
    entries: list[dict] = []
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        line = await asyncio.wait_for(loop.run_in_executor(None, worker.stderr.readline), deadline - loop.time())
        if not line:
            break
        entries.append(json.loads(line))  # every line the worker writes is one JSON object
        if entries[-1]["message"].startswith(message):
            return entries
    raise AssertionError(f"the worker never logged {message!r}: {entries}")


async def relay_running(dev_env, settings) -> None:
    """Wait until the outbox relay's long activity runs on the worker: a worker is never idler than that."""
    from temporalio.api.enums.v1 import PendingActivityState

    from workflows.outbox import RELAY_WORKFLOW_ID

    handle = dev_env.client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{settings.task_queue}")

    async def started() -> bool:
        pending = (await handle.describe()).raw_description.pending_activities
        return any(a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED for a in pending)
    await wait_until(started, 90)


async def stop(worker: subprocess.Popen) -> tuple[float, list[dict]]:
    """SIGTERM, then the seconds until the process exits, and what it logged meanwhile."""
    loop = asyncio.get_running_loop()
    began = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    logged = []
    while line := await loop.run_in_executor(None, worker.stderr.readline):
        logged.append(json.loads(line))
        print(f"  +{time.monotonic() - began:5.2f} s  {logged[-1]['message']}")
    await loop.run_in_executor(None, worker.wait)
    return time.monotonic() - began, logged


@pytest.mark.usefixtures("schedules_removed_after")
async def test_an_idle_worker_stops_well_before_the_grace_period(dev_env, settings):
    worker = start_worker(settings, dev_env)
    try:
        started = await read_log_until(worker, "worker started")
        assert all({"time", "level", "logger", "message"} <= set(entry) for entry in started)
        await relay_running(dev_env, settings)
        elapsed, logged = await stop(worker)
    finally:
        worker.kill()
    print(f"\nidle worker stopped {elapsed:.2f} s after SIGTERM (grace period {GRACE_SECONDS} s)")
    assert worker.returncode == 0, logged
    assert logged[-1]["message"] == "worker stopped"
    # Measured, not a timing goal: an idle stop must not have waited for the grace period to force it.
    assert elapsed < GRACE_SECONDS / 2, elapsed


@pytest.mark.usefixtures("schedules_removed_after")
async def test_a_batch_in_flight_finishes_before_the_worker_stops(dev_env, settings, db, mailgun):
    seeded = await seed_email(db, members=10)
    mailgun.set_faults(latency_ms=4000)  # the one batch is in flight for 4 s
    worker = start_worker(settings, dev_env)
    try:
        await read_log_until(worker, "worker started")
        await relay_running(dev_env, settings)
        await dev_env.client.start_workflow(SendNewsletterWorkflow.run, {"email_id": seeded.email_id},
                                            id=newsletter_workflow_id(seeded.email_id), task_queue=settings.task_queue)

        async def in_flight() -> bool:
            return await db.fetchval("SELECT count(*) FROM email_batches WHERE email_id = $1 AND status = 'submitting'",
                                     seeded.email_id) == 1
        await wait_until(in_flight, 90)
        elapsed, logged = await stop(worker)
    finally:
        worker.kill()
    print(f"\nworker with a batch in flight stopped {elapsed:.2f} s after SIGTERM")
    assert worker.returncode == 0, logged
    # The batch was not cut off: Mailgun took it and the database says so.
    assert len(mailgun.messages) == 1
    assert await db.fetchval("SELECT status FROM email_batches WHERE email_id = $1", seeded.email_id) == "submitted"
    assert elapsed < GRACE_SECONDS

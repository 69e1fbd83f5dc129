"""Resuming from a heartbeat, the schedule, backfills, the command line and malformed events."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import os
import time
from datetime import timedelta

import pytest
from rich.console import Console
from temporalio.client import ScheduleOverlapPolicy
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.analytics.models import AggregateInput, FetchPhaseInput
from commands.analytics import print_analytics_status
from operations.analytics import (
    analytics_backfill,
    analytics_pause,
    analytics_schedule,
    analytics_schedule_id,
    analytics_status,
    analytics_trigger,
)
from pressroom.errors import BadInput
from pressroom.providers.mailgun import MailgunClient, parse_event
from pressroom.providers.port import ProviderUnavailable
from pressroom.store.events import EventBatch
from tests import command_line
from worker import running_worker

from .conftest import activities_for, actual_counts, address, seed_newsletter, sim_now


class BreaksAfter(MailgunClient):
    """The events API answers `pages` pages, then the connection fails: a crash in mid-fetch."""

    def __init__(self, pages: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.pages = pages

    async def events_page(self, *args, **kwargs):
        self.pages -= 1
        if self.pages < 0:
            raise ProviderUnavailable("Mailgun could not be reached (test)", may_have_been_accepted=False)
        return await super().events_page(*args, **kwargs)


async def test_a_retry_resumes_from_the_heartbeated_page_without_double_counting(
        db, mailgun, client, analytics_settings):
    await seed_newsletter(db, members=4500, emails=1)
    mailgun.add_synthetic_events(email_id="e0", recipients=[address(n) for n in range(4500)], events=["delivered"])
    now = sim_now(mailgun)
    env = ActivityEnvironment()
    heartbeats = []
    env.on_heartbeat = lambda *details: heartbeats.append(details[0])
    options = dict(base_url=mailgun.base_url, api_key=mailgun.api_key, domain=mailgun.domain)
    async with BreaksAfter(12, **options) as breaking:
        with pytest.raises(ApplicationError, match="could not be reached"):
            await env.run(activities_for(analytics_settings, db, breaking).fetch_phase,
                          FetchPhaseInput(phase="latest", now=now))
    # A heartbeat for every page read (signs of life), each carrying the last checkpoint: the one
    # batch of 10 pages applied before the connection broke.
    assert len(heartbeats) >= 10 and heartbeats[0] is None
    assert heartbeats[-1]["result"]["events"] == 3000
    assert await db.fetchval("SELECT count(delivered_at) FROM email_recipients") == 3000

    requests = mailgun.request_counts["events"]
    env.info = dataclasses.replace(env.info, heartbeat_details=[heartbeats[-1]], attempt=2)
    result = await env.run(activities_for(analytics_settings, db, client).fetch_phase,
                           FetchPhaseInput(phase="latest", now=now))
    assert mailgun.request_counts["events"] - requests == 6  # pages 11 to 15 and the empty one, not 16
    assert result.events == 4500 and result.applied == 4500 and result.by_type == {"delivered": 4500}
    await env.run(activities_for(analytics_settings, db, client).aggregate_stats,
                  AggregateInput())
    emails, _ = await actual_counts(db)
    assert emails["e0"] == (4500, 0, 0)


@pytest.mark.usefixtures("schedules_removed_after")  # an earlier test's `pressroom worker` made one
async def test_the_schedule_is_created_once_and_keeps_its_paused_state(dev_env, db, mailgun, analytics_settings):
    client = dev_env.client
    try:
        assert await analytics_schedule(analytics_settings, client) == "created"
        assert await analytics_schedule(analytics_settings, client) == "updated"
        description = await client.get_schedule_handle(analytics_schedule_id(analytics_settings)).describe()
        assert description.schedule.spec.intervals[0].every == timedelta(seconds=300)
        assert description.schedule.spec.jitter == timedelta(seconds=60)
        assert description.schedule.policy.overlap == ScheduleOverlapPolicy.SKIP
        await analytics_pause(True, analytics_settings, client)
        assert await analytics_schedule(analytics_settings, client) == "updated"
        assert (await analytics_status(analytics_settings, client))["paused"] is True
        await analytics_pause(False, analytics_settings, client)

        await seed_newsletter(db, members=3, emails=1)
        mailgun.add_synthetic_events(email_id="e0", recipients=[address(0)])
        async with running_worker(client, analytics_settings):
            await analytics_trigger(analytics_settings, client)
            deadline = time.monotonic() + 30
            while not await db.fetchval("SELECT metadata ? 'runs' FROM jobs WHERE name = 'email-analytics'"):
                assert time.monotonic() < deadline, "the triggered run did not finish"
                await asyncio.sleep(0.2)
            status = await analytics_status(analytics_settings, client)
            while status["running"]:  # its last step recorded the run; the run itself closes just after
                assert time.monotonic() < deadline, "the triggered run did not close"
                await asyncio.sleep(0.2)
                status = await analytics_status(analytics_settings, client)
        assert status["paused"] is False and status["recent"] and status["runs"][0]["error"] is None
        assert set(status["cursors"]) == {"email-analytics-latest-opened", "email-analytics-latest",
                                          "email-analytics-missing"}
        assert all(c["lag_seconds"] is not None for c in status["cursors"].values())
        # The run has finished: no cursor reads as started.
        assert {c["status"] for c in status["cursors"].values()} == {"idle"}
        emails, _ = await actual_counts(db)
        assert emails["e0"] == (1, 1, 0)
        out = Console(file=io.StringIO(), width=200)
        print_analytics_status(status, out)
        text = out.file.getvalue()
        assert f"schedule {analytics_schedule_id(analytics_settings)}: active" in text
        assert "cursor email-analytics-latest:" in text
        assert "lag" in text and "2 events: delivered 1, opened 1" in text
    finally:
        await client.get_schedule_handle(analytics_schedule_id(analytics_settings)).delete()


async def test_a_backfill_rereads_an_old_range(dev_env, db, mailgun, client, analytics_settings):
    await seed_newsletter(db, members=20, emails=1)
    old = mailgun.now() - 3 * 86400  # older than a first run's 24-hour look-back
    mailgun.add_synthetic_events(email_id="e0", recipients=[address(n) for n in range(20)], timestamp=old)
    from .test_fetch import run_fetch

    await run_fetch(dev_env, analytics_settings, sim_now(mailgun))
    assert (await actual_counts(db))[0]["e0"] == (0, 0, 0)

    for begin, end, words in (("yesterday", "2026-01-01T00:00:00Z", "--from 'yesterday' is not an ISO 8601"),
                              ("2026-01-01T00:00:00", "2026-01-02T00:00:00Z", "needs a UTC offset"),
                              ("2026-01-02T00:00:00Z", "2026-01-01T00:00:00Z", "must come before")):
        with pytest.raises(BadInput, match=words):
            await analytics_backfill(begin, end, analytics_settings)
    assert await db.fetchval("SELECT count(*) FROM jobs WHERE name LIKE 'email-analytics-backfill-%'") == 0

    moment = sim_now(mailgun) - timedelta(days=3)
    name = await analytics_backfill((moment - timedelta(hours=1)).isoformat(),
                                    (moment + timedelta(hours=1)).isoformat(), analytics_settings)
    result = await run_fetch(dev_env, analytics_settings, sim_now(mailgun))
    backfill = next(p for p in result.phases if p.phase == "backfill")
    assert backfill.applied == 40
    assert (await actual_counts(db))[0]["e0"] == (20, 20, 0)
    assert await db.fetchval("SELECT status FROM jobs WHERE name = $1", name) == "finished"


def test_malformed_events_are_counted_and_skipped():
    batch = EventBatch()
    good = {"id": "a", "event": "opened", "timestamp": 1_700_000_000.5, "recipient": "x@example.com",
            "user-variables": {"email-id": "e0"}}
    batch.add([good, {"event": "opened"}, {**good, "timestamp": "soon"}, {**good, "user-variables": None},
               {**good, "recipient": 7}, {**good, "event": "clicked"}], parse_event)
    assert len(batch) == 1 and batch.malformed == 4 and batch.by_type == {"opened": 1, "clicked": 1}


def test_the_commands_have_help_and_bad_times_are_one_line():
    def pressroom(*args):
        return command_line.run(list(args), {**os.environ, "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/x"})

    from concurrent.futures import ThreadPoolExecutor

    commands = [("analytics", command, "--help") for command in ("schedule", "run", "pause", "unpause", "status",
                                                                 "backfill")]
    commands.append(("analytics", "backfill", "--from", "2026-13-01T00:00:00Z", "--to", "2026-01-01T00:00:00Z"))
    with ThreadPoolExecutor(len(commands)) as pool:  # each its own process, all at once
        *helps, result = pool.map(lambda command: pressroom(*command), commands)
    for help in helps:
        assert "Usage" in help.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1 and len(lines) == 1 and "--from" in lines[0] and "ISO 8601" in lines[0]


class BreaksOnce(BreaksAfter):
    """Fails one request after `pages` pages, then works again: the retried attempt must resume."""

    async def events_page(self, *args, **kwargs):
        self.pages -= 1
        if self.pages == -1:
            raise ProviderUnavailable("Mailgun could not be reached (test)", may_have_been_accepted=False)
        return await MailgunClient.events_page(self, *args, **kwargs)


async def test_a_failed_attempt_in_a_workflow_resumes_from_temporal_heartbeat_details(
        dev_env, db, mailgun, analytics_settings):
    from activities.analytics.models import FetchEmailAnalyticsInput
    from pressroom.dependencies import Dependencies
    from worker import build_worker
    from workflows.analytics import FetchEmailAnalyticsWorkflow

    await seed_newsletter(db, members=4500, emails=1)
    mailgun.add_synthetic_events(email_id="e0", recipients=[address(n) for n in range(4500)], events=["delivered"])
    options = dict(base_url=mailgun.base_url, api_key=mailgun.api_key, domain=mailgun.domain)
    # latest-opened reads one (empty) page; then latest breaks after its 12th page.
    async with BreaksOnce(13, **options) as breaking:
        deps = Dependencies(settings=analytics_settings, pool=db, provider=breaking, temporal=dev_env.client)
        async with build_worker(dev_env.client, deps):
            result = await dev_env.client.execute_workflow(
                FetchEmailAnalyticsWorkflow.run, FetchEmailAnalyticsInput(now=sim_now(mailgun)),
                id=f"analytics-resume-{time.time_ns()}", task_queue=analytics_settings.task_queue,
                execution_timeout=timedelta(minutes=1))
    latest = result.phases[1]
    assert latest.phase == "latest" and latest.events == 4500 and latest.applied == 4500
    # opened: 1 page; latest: 12 pages, the failure (never sent), then pages 11..15 and the empty
    # one, not from page 1 again (that would be 16); the first missing window is empty; no backfills.
    assert mailgun.request_counts["events"] == 1 + 12 + 6
    emails, _ = await actual_counts(db)
    assert emails["e0"] == (4500, 0, 0)

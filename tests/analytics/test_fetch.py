"""The analytics fetch against real PostgreSQL, the real Temporal dev server and the simulator over HTTP."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from pydantic import SecretStr
from temporalio.client import WorkflowFailureError
from temporalio.worker import Replayer

from activities.analytics.models import FetchEmailAnalyticsInput, FetchEmailAnalyticsResult
from tests.conftest import make_settings
from worker import running_worker
from workflows.analytics import FetchEmailAnalyticsWorkflow

from .conftest import (
    actual_counts,
    address,
    expected_counts,
    seed_newsletter,
    send_all,
    sim_now,
    simulator_truth,
    snapshot,
)


async def run_fetch(dev_env, settings, now, *, workflow_id: str | None = None) -> FetchEmailAnalyticsResult:
    async with running_worker(dev_env.client, settings):
        return await dev_env.client.execute_workflow(
            FetchEmailAnalyticsWorkflow.run, FetchEmailAnalyticsInput(now=now),
            id=workflow_id or f"analytics-test-{uuid.uuid4().hex[:8]}", task_queue=settings.task_queue,
            execution_timeout=timedelta(minutes=2))


async def test_counts_equal_the_simulator_event_log_and_a_second_read_changes_nothing(
        dev_env, db, mailgun, client, analytics_settings):
    email_ids = await seed_newsletter(db, members=1500, emails=5)
    email_ids += await seed_newsletter(db, members=1500, emails=1, track_opens=False, first_email=5)
    await send_all(client, db, email_ids)
    mailgun.advance(60)  # every recipient's events have happened and are visible

    workflow_id = f"analytics-test-{uuid.uuid4().hex[:8]}"
    result = await run_fetch(dev_env, analytics_settings, sim_now(mailgun), workflow_id=workflow_id)
    truth = await simulator_truth(client)
    expected_emails, expected_members = await expected_counts(db, truth)
    emails, members = await actual_counts(db)
    assert emails == expected_emails
    assert members == expected_members
    assert any(rate is not None for _, _, rate in members.values())
    by_type = result.by_type()
    stats = mailgun.stats()["events_by_kind"]
    for kind in ("delivered", "opened", "failed", "unsubscribed", "complained"):
        assert by_type[kind] == stats[kind], kind
    assert result.phases[0].phase == "latest-opened" and result.aggregate.emails == 6
    assert all(p.unknown == 0 and p.malformed == 0 for p in result.phases)
    # Side effects: failures (both kinds), complaints, suppressions, unsubscribes.
    failures = await db.fetchval("SELECT count(*) FROM email_recipient_failures")
    assert failures == stats["failed"]
    assert await db.fetchval("SELECT count(*) FROM email_spam_complaint_events") == stats["complained"]
    assert await db.fetchval("SELECT count(*) FROM suppressions WHERE reason = 'spam'") > 0
    permanent = await db.fetchval("SELECT count(DISTINCT er.member_email) FROM email_recipient_failures f "
                                  "JOIN email_recipients er ON er.id = f.email_recipient_id "
                                  "WHERE f.severity = 'permanent'")
    assert await db.fetchval("SELECT count(*) FROM suppressions WHERE reason = 'bounce'") == permanent
    unsubscribed = {addr for (_, addr), seen in truth.items() if seen.get("unsubscribed")}
    assert unsubscribed and await db.fetchval("SELECT count(*) FROM members_newsletters") == 1500 - len(unsubscribed)
    status = json.loads(await db.fetchval("SELECT metadata FROM jobs WHERE name = 'email-analytics'"))
    assert status["runs"][0]["phases"][0]["events"] == by_type["opened"]

    # The same window again (cursors forgotten): nothing changes.
    before = await snapshot(db)
    await db.execute("DELETE FROM jobs WHERE name LIKE 'email-analytics-%'")
    again = await run_fetch(dev_env, analytics_settings, sim_now(mailgun))
    assert again.events == result.events
    assert await snapshot(db) == before

    # A replay of the finished run's history is deterministic.
    history = await dev_env.client.get_workflow_handle(workflow_id).fetch_history()
    await Replayer(workflows=[FetchEmailAnalyticsWorkflow],
                   data_converter=dev_env.client.data_converter).replay_workflow(history)


async def test_late_events_are_picked_up_by_the_missing_phase(dev_env, db, mailgun, client, analytics_settings):
    email_ids = await seed_newsletter(db, members=600, emails=1)
    mailgun.set_faults(late_event_share=0.3, late_event_seconds=600)
    await send_all(client, db, email_ids)
    mailgun.advance(30)
    first = await run_fetch(dev_env, analytics_settings, sim_now(mailgun))
    early, _ = await actual_counts(db)

    mailgun.advance(900)  # the late events are now stored, with their old timestamps
    second = await run_fetch(dev_env, analytics_settings, sim_now(mailgun))
    missing = next(p for p in second.phases if p.phase == "missing")
    assert missing.events > 0 and missing.applied > 0
    assert sum(p.events for p in second.phases if p.phase.startswith("latest")) == 0
    truth = await simulator_truth(client)
    expected_emails, expected_members = await expected_counts(db, truth)
    emails, members = await actual_counts(db)
    assert emails == expected_emails and members == expected_members
    assert emails["e0"] != early["e0"]
    assert first.phases[2].phase == "missing" and first.phases[2].events == 0


async def test_the_opened_cap_restarts_the_run_at_once(dev_env, db, mailgun, client, postgres_url):
    settings = make_settings(postgres_url, mailgun, analytics_end_margin_seconds=0,
                             analytics_max_opened_events=50)
    await seed_newsletter(db, members=180, emails=1)
    mailgun.add_synthetic_events(email_id="e0", recipients=[address(n) for n in range(180)],
                                 events=["delivered", "opened"], spread_seconds=60, chunk=20)
    workflow_id = f"analytics-cap-{uuid.uuid4().hex[:8]}"
    result = await run_fetch(dev_env, settings, sim_now(mailgun), workflow_id=workflow_id)
    assert not result.capped  # the last run of the chain
    runs = json.loads(await db.fetchval("SELECT metadata FROM jobs WHERE name = 'email-analytics'"))["runs"]
    opened_per_run = [run["phases"][0]["events"] for run in reversed(runs)]
    assert opened_per_run[:3] == [50, 50, 50] and all(run["capped"] for run in runs[1:])
    assert sum(opened_per_run) == 180
    # Capped runs read only opened events; the others waited for the last run of the chain.
    assert all(len(run["phases"]) == 1 for run in runs[1:])
    emails, _ = await actual_counts(db)
    assert emails["e0"] == (180, 180, 0)
    description = await dev_env.client.get_workflow_handle(workflow_id).describe()
    assert description.run_id  # one workflow id, several runs through continue-as-new


async def test_open_rate_is_empty_below_five_tracked_emails(dev_env, db, mailgun, client, analytics_settings):
    email_ids = await seed_newsletter(db, members=3, emails=5)
    await db.execute("DELETE FROM email_recipients WHERE member_id = 'm0' AND email_id = 'e4'")  # m0: 4 emails
    for email_id in email_ids:
        mailgun.add_synthetic_events(email_id=email_id, recipients=[address(0), address(1)],
                                     events=["delivered", "opened"])
    mailgun.add_synthetic_events(email_id="e0", recipients=[address(2)], events=["delivered", "opened"])
    mailgun.add_synthetic_events(email_id="e1", recipients=[address(2)], events=["delivered"])
    await run_fetch(dev_env, analytics_settings, sim_now(mailgun))
    _, members = await actual_counts(db)
    assert members["m0"] == (4, 4, None)
    assert members["m1"] == (5, 5, 100)
    assert members["m2"] == (5, 1, 20)


@pytest.mark.parametrize("fault", ["unauthorized", "server_error", "malformed"])
async def test_api_failures_fail_the_run_clearly_with_no_write(dev_env, db, mailgun, client, postgres_url, fault):
    settings = make_settings(postgres_url, mailgun, analytics_end_margin_seconds=0)
    if fault == "unauthorized":
        settings = settings.model_copy(update={"mailgun_api_key": SecretStr("key-wrong-0000")})
    await seed_newsletter(db, members=10, emails=1)
    mailgun.add_synthetic_events(email_id="e0", recipients=[address(n) for n in range(10)])
    if fault == "server_error":
        mailgun.set_faults(events_error_rate=1.0)
    elif fault == "malformed":
        mailgun.set_faults(malformed_events=True)
    before = await snapshot(db)
    with pytest.raises(WorkflowFailureError) as failure:
        await run_fetch(dev_env, settings, sim_now(mailgun))
    message = failure.value.cause.message
    assert "\n" not in message and "phase latest-opened" in message
    assert {"unauthorized": "401", "server_error": "(500)", "malformed": "not JSON"}[fault] in message
    assert "key-wrong" not in message
    assert await snapshot(db) == before
    run = json.loads(await db.fetchval("SELECT metadata FROM jobs WHERE name = 'email-analytics'"))["runs"][0]
    assert run["error"] == message


async def test_unknown_emails_and_recipients_are_counted_and_skipped(dev_env, db, mailgun, client,
                                                                   analytics_settings):
    await seed_newsletter(db, members=5, emails=1)
    mailgun.add_synthetic_events(email_id="no-such-email", recipients=[address(0), address(1)])
    mailgun.add_synthetic_events(email_id="e0", recipients=["stranger@example.com"])
    before = await snapshot(db)
    result = await run_fetch(dev_env, analytics_settings, sim_now(mailgun))
    assert sum(p.unknown for p in result.phases) == 6 and sum(p.applied for p in result.phases) == 0
    assert await snapshot(db) == before

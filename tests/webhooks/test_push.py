"""Events pushed by the simulator as Mailgun pushes them, through the receiver and the inbox workflow,
into the statistics; and the polling net converging on the same state. Real HTTP both ways, real
PostgreSQL, the Temporal dev server."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid

import pytest

from devstack.servers import free_port
from operations.webhooks import webhooks_setup
from pressroom.providers.mailgun import MailgunPush
from tests.analytics.conftest import (
    actual_counts,
    address,
    expected_counts,
    seed_newsletter,
    send_all,
    sim_now,
    simulator_truth,
    snapshot,
)
from tests.operations.test_waiting import cli, cli_env, start_cli
from worker import running_worker

from .conftest import eventually, start_inbox


async def poll(dev_env, settings, now):
    """One analytics run on the worker already running (the polling net)."""
    from datetime import timedelta

    from activities.analytics.models import FetchEmailAnalyticsInput
    from workflows.analytics import FetchEmailAnalyticsWorkflow

    return await dev_env.client.execute_workflow(
        FetchEmailAnalyticsWorkflow.run, FetchEmailAnalyticsInput(now=now), id=f"analytics-test-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue, execution_timeout=timedelta(minutes=2))


async def stop_inbox(dev_env, settings) -> None:
    from activities.webhooks import INBOX_WORKFLOW_ID

    await dev_env.client.get_workflow_handle(f"{INBOX_WORKFLOW_ID}-{settings.task_queue}").terminate("test over")


async def test_setup_registers_every_kind_once_and_shows_what_changed(dev_env, mailgun, webhook_settings):
    first = f"https://hooks.example.com{MailgunPush.path}"
    assert set((await webhooks_setup(first, webhook_settings)).values()) == {"created"}
    assert set((await webhooks_setup(first, webhook_settings)).values()) == {"unchanged"}
    mailgun.webhooks[mailgun.domain]["opened"] = ["https://other.example.com/hook"]  # someone else's
    changes = await webhooks_setup(first, webhook_settings)
    assert changes["opened"] == "added" and changes["delivered"] == "unchanged"
    assert mailgun.webhooks[mailgun.domain]["opened"] == ["https://other.example.com/hook", first]
    assert sorted(mailgun.webhooks[mailgun.domain]) == sorted(
        ["delivered", "opened", "permanent_fail", "temporary_fail", "unsubscribed", "complained"])

    env = cli_env(webhook_settings, dev_env)
    code, out, err = await cli("webhooks", "setup", "--url", first, env=env)
    assert code == 0 and "delivered       unchanged" in out, err
    code, out, err = await cli("webhooks", "setup", "--url", "ftp://user:pw@hooks.example.com", env=env)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1 and "--url" in lines[0] and "pw" not in lines[0]


@pytest.mark.slow
async def test_a_send_pushed_reaches_the_statistics_and_polling_then_changes_nothing(
        dev_env, db, mailgun, receiver, webhook_settings):
    from pressroom.providers.mailgun import MailgunClient

    ids = await seed_newsletter(db, members=400, emails=1)
    mailgun.set_rates(complained=0.05, unsubscribed=0.05)  # a few of each in 400
    await webhooks_setup(receiver.url, webhook_settings)
    async with running_worker(dev_env.client, webhook_settings), \
            MailgunClient(base_url=mailgun.base_url, api_key=mailgun.api_key, domain=mailgun.domain) as client:
        await start_inbox(dev_env, webhook_settings)
        try:
            await send_all(client, db, ids)
            # Every event happens within 12 s of the send (the simulator's offsets) and is pushed then.
            await eventually(lambda: _settled(mailgun), seconds=90)
            truth = await simulator_truth(client)
            expected_emails, expected_members = await expected_counts(db, truth)

            async def counted():
                return await actual_counts(db) == (expected_emails, expected_members)
            assert await eventually(counted, seconds=60)
            assert mailgun.push_stats().get("answered_200") == mailgun.event_count - mailgun.stats()[
                "events_by_kind"]["accepted"]
            assert await db.fetchval("SELECT count(*) FROM email_recipient_failures") > 0
            assert await db.fetchval("SELECT count(*) FROM email_spam_complaint_events") > 0
            pushed = await snapshot(db)

            # The polling net reads the same events: nothing changes.
            mailgun.advance(60)
            result = await poll(dev_env, webhook_settings, sim_now(mailgun))
            assert result.error is None and sum(p.applied for p in result.phases) > 0
            assert await snapshot(db) == pushed
        finally:
            await stop_inbox(dev_env, webhook_settings)


async def _settled(mailgun) -> bool:
    stats = mailgun.push_stats()
    return stats["pending"] == 0 and stats.get("pushed", 0) > 0


def _add_events(mailgun, email_id: str, base: float) -> None:
    """Failures in an order that tests the rules (temporary, then permanent, then a later temporary that
    must not replace it), opens twice (the first stands), deliveries."""
    members = [address(n) for n in range(60)]
    mailgun.add_synthetic_events(email_id=email_id, recipients=members, timestamp=base, events=["delivered", "opened"])
    mailgun.add_synthetic_events(email_id=email_id, recipients=members[:30], timestamp=base + 50, events=["opened"])
    for offset, kind, code in ((0, "failed-temporary", 452), (20, "failed", 550), (40, "failed-temporary", 421)):
        mailgun.add_synthetic_events(email_id=email_id, recipients=members[40:], timestamp=base + offset,
                                     events=[kind], delivery_status={"code": code, "message": f"try {offset}"})


async def _state(db, email_id: str) -> list[tuple]:
    rows = await db.fetch(
        "SELECT er.member_id, er.delivered_at, er.opened_at, er.failed_at, f.severity, f.code, f.message, f.failed_at "
        "FROM email_recipients er LEFT JOIN email_recipient_failures f ON f.email_recipient_id = er.id "
        "WHERE er.email_id = $1 ORDER BY er.member_id", email_id)
    return [tuple(r) for r in rows]


@pytest.mark.slow
async def test_duplicated_and_reordered_pushes_end_in_the_state_polling_gives(
        dev_env, db, mailgun, receiver, webhook_settings):
    await seed_newsletter(db, members=60, emails=2)
    base = mailgun.now() - 300
    _add_events(mailgun, "e1", base)  # before any webhook: polled only
    await webhooks_setup(receiver.url, webhook_settings)
    mailgun.set_push(duplicate_rate=0.5, reorder_seconds=3.0)
    _add_events(mailgun, "e0", base)  # pushed, duplicated and out of order
    async with running_worker(dev_env.client, webhook_settings):
        await start_inbox(dev_env, webhook_settings)
        try:
            await eventually(lambda: _settled(mailgun), seconds=90)

            async def inbox_drained():
                return await db.fetchval("SELECT count(*) FROM webhook_inbox") == 0
            assert await eventually(inbox_drained, seconds=60)
            assert mailgun.push_stats()["duplicates"] > 0
            pushed = await _state(db, "e0")
            assert any(row[4] == "permanent" and row[6] == "try 20" for row in pushed)

            result = await poll(dev_env, webhook_settings, sim_now(mailgun))
            assert result.error is None
            assert await _state(db, "e0") == pushed  # polling the same events changes nothing
            assert [row[1:] for row in await _state(db, "e1")] == [row[1:] for row in pushed]
        finally:
            await stop_inbox(dev_env, webhook_settings)


@pytest.mark.crash
async def test_a_receiver_killed_mid_burst_loses_nothing_the_simulator_retries(
        dev_env, db, mailgun, webhook_settings):
    """`pressroom webhooks serve` as a process, kill -9 while the simulator pushes 3,000 events, started
    again: with Mailgun's retries (time-compressed), every event is applied exactly once."""
    await seed_newsletter(db, members=3000, emails=1)
    port = free_port()
    url = f"http://127.0.0.1:{port}{MailgunPush.path}"
    env = cli_env(webhook_settings, dev_env, MAILGUN_WEBHOOK_SIGNING_KEY=mailgun.webhook_signing_key)

    async def serve():
        process = await start_cli("webhooks", "serve", "--port", str(port), env=env)
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        assert b"front door on" in line, (await process.stderr.read()).decode()
        return process

    receiver = await serve()
    try:
        await webhooks_setup(url, webhook_settings)
        mailgun.set_push(retry_scale=0.002)  # 10 min → 1.2 s … 4 h → 29 s
        async with running_worker(dev_env.client, webhook_settings):
            await start_inbox(dev_env, webhook_settings)
            try:
                mailgun.add_synthetic_events(email_id="e0", count=3000, events=["delivered"])

                async def some_received():
                    return mailgun.push_stats().get("answered_200", 0) >= 100
                assert await eventually(some_received, seconds=60, every=0.01)
                os.kill(receiver.pid, signal.SIGKILL)
                await receiver.wait()
                refused = mailgun.push_stats().get("errors", 0)

                async def pushes_found_nobody():  # Mailgun's retries take them once the receiver is back
                    return mailgun.push_stats().get("errors", 0) > refused
                assert await eventually(pushes_found_nobody, seconds=60, every=0.01)
                receiver = await serve()

                async def all_applied():
                    return await db.fetchval("SELECT count(delivered_at) FROM email_recipients") == 3000 and \
                        await db.fetchval("SELECT count(*) FROM webhook_inbox") == 0
                assert await eventually(all_applied, seconds=120)
                stats = mailgun.push_stats()
                assert stats.get("retries", 0) > 0 and stats.get("gave_up", 0) == 0
                assert stats["answered_200"] == 3000  # every event answered 200 once: none lost
                # A request stored just before the kill was never answered: its retry (a new token) stored it
                # again, and applying it a second time changed nothing.
                assert await db.fetchval("SELECT count(*) FROM webhook_tokens") >= 3000

                async def counted():
                    return await db.fetchval("SELECT delivered_count FROM emails WHERE id = 'e0'") == 3000
                assert await eventually(counted, seconds=30)
            finally:
                await stop_inbox(dev_env, webhook_settings)
    finally:
        receiver.kill()
        await receiver.wait()

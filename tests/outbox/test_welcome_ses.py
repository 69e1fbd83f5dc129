"""The welcome email through SES: the real relay and outbox delivery on the dev server, SES's
client against the stand-in (request signing checked), the SNS pushes into PostgreSQL."""

from __future__ import annotations

import json

import pytest

from activities.outbox.welcome import OUTBOX_MARK
from operations.members import add_member
from operations.outbox import ensure_relay
from tests.outbox.test_outbox import WELCOME, settled
from tests.ses_stack import running_ses_stack, subscribed
from tests.webhooks.conftest import eventually
from worker import running_worker
from workflows.outbox import RELAY_WORKFLOW_ID


@pytest.fixture
async def ses(postgres_url, mailgun, db, monkeypatch, tmp_path):
    async with running_ses_stack(postgres_url, mailgun, monkeypatch, tmp_path, outbox_backoff_seconds=[1],
                                 outbox_poll_interval_seconds=0.2) as stack:
        stack.simulator.auto_push = True
        await subscribed(stack)
        yield stack


async def test_a_new_member_gets_one_welcome_email_through_ses(db, ses, dev_env):
    await db.execute(WELCOME)
    settings = ses.settings
    async with running_worker(dev_env.client, settings):
        await ensure_relay(dev_env.client, settings)
        try:
            added = await add_member("new.reader@example.com", "New Reader", welcome=True, settings=settings)
            await settled(db, added.welcome_key)
        finally:
            await dev_env.client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{settings.task_queue}").terminate()

    [copy] = [c for c in ses.simulator.delivered if c.address == "new.reader@example.com"]
    assert len(ses.simulator.delivered) == 1 and ses.simulator.requests["refused_signature"] == 0
    assert copy.subject == "Welcome!" and "Welcome New Reader" in copy.html
    assert copy.tags[OUTBOX_MARK] == added.welcome_key and "welcome-email" in copy.tags
    ledger = await db.fetchrow("SELECT status, result FROM idempotency_ledger WHERE idempotency_key = $1",
                               added.welcome_key)
    assert ledger["status"] == "succeeded" and json.loads(ledger["result"])["provider_id"] == copy.message_id
    recorded = await db.fetchrow("SELECT provider_id, send_outcome, send_attempts FROM automated_email_recipients "
                                 "WHERE member_id = $1", added.member_id)
    assert tuple(recorded) == (copy.message_id, "accepted", 1)

    async def kept() -> bool:  # its Send event, pushed through SNS, is what would confirm a lost answer
        return await db.fetchval("SELECT count(*) FROM provider_acceptances WHERE marks ->> $1 = $2",
                                 OUTBOX_MARK, added.welcome_key) == 1
    assert await eventually(kept, seconds=30)

"""Welcome emails as the reference platform's own scenarios expect them, end to end on real servers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from temporalio.client import WorkflowFailureError

from activities.outbox import outbox_workflow_id
from operations.members import add_member
from operations.outbox import ensure_relay, outbox_entry, requeue_outbox_entry
from tests.foundation.test_cli import assert_one_line_error, pressroom
from tests.outbox.test_outbox import settled
from worker import running_worker
from workflows.outbox import RELAY_WORKFLOW_ID

WELCOMES = ("INSERT INTO automated_emails (name, slug, subject, html) VALUES "
            "('Welcome', 'member-welcome-email-free', 'Welcome, free reader', '<p>Hello %recipient.name%</p>'), "
            "('Thanks', 'member-welcome-email-paid', 'Thank you for subscribing', '<p>Thanks %recipient.name%</p>')")


async def delivery_closed(client, key: str) -> None:
    with contextlib.suppress(WorkflowFailureError):  # closed all the same
        await asyncio.wait_for(client.get_workflow_handle(outbox_workflow_id(key)).result(), 90)


def sent_to(mailgun, address: str) -> list:
    return [m for m in mailgun.messages if address in m.recipients]


async def test_comped_member_receives_paid_welcome_email(db, mailgun, relay, caplog):
    caplog.set_level(logging.INFO)
    await db.execute(WELCOMES)
    added = await add_member("comped@example.com", "Comped Reader", status="comped", welcome=True, settings=relay)
    await settled(db, added.welcome_key)
    [message] = sent_to(mailgun, "comped@example.com")
    assert message.subject == "Thank you for subscribing"
    paid_id = await db.fetchval("SELECT id FROM automated_emails WHERE slug = 'member-welcome-email-paid'")
    assert await db.fetchval("SELECT automated_email_id FROM automated_email_recipients WHERE member_id = $1",
                             added.member_id) == paid_id
    assert "no welcome email of their own for comped members: sending them member-welcome-email-paid" in caplog.text


async def test_paid_and_free_members_receive_their_own_welcome_email(db, mailgun, relay):
    await db.execute(WELCOMES)
    paid = await add_member("paid@example.com", status="paid", welcome=True, settings=relay)
    free = await add_member("free@example.com", welcome=True, settings=relay)
    await settled(db, paid.welcome_key)
    await settled(db, free.welcome_key)
    assert [m.subject for m in sent_to(mailgun, "paid@example.com")] == ["Thank you for subscribing"]
    assert [m.subject for m in sent_to(mailgun, "free@example.com")] == ["Welcome, free reader"]


async def test_members_add_creates_paid_and_comped_members_from_the_command_line(postgres_url, db):
    env = {"DATABASE_URL": postgres_url}
    for status in ("paid", "comped"):
        result = await asyncio.to_thread(pressroom, "members", "add", f"{status}@example.com", "--status", status,
                                         "--welcome", env=env)
        assert result.returncode == 0, result.stderr
        assert "welcome email queued" in result.stdout
        assert await db.fetchval("SELECT status FROM members WHERE email = $1", f"{status}@example.com") == status
    refused = await asyncio.to_thread(pressroom, "members", "add", "vip@example.com", "--status", "vip", env=env)
    assert_one_line_error(refused, "member status 'vip' is not one of free, paid, comped")
    assert await db.fetchval("SELECT count(*) FROM members WHERE email = 'vip@example.com'") == 0


async def test_welcome_email_switched_off_after_queueing_is_not_sent(db, mailgun, dev_env, outbox_settings):
    """The switch is read when the entry is handled: an entry queued while it was on is not sent
    by a worker that has it off; it is aborted with the reason, and a requeue sends it later."""
    await db.execute(WELCOMES)
    # The switch on: queued.
    queued = await add_member("queued.before@example.com", welcome=True, settings=outbox_settings())
    assert queued.welcome_key is not None

    off = outbox_settings(welcome_emails=False)
    async with running_worker(dev_env.client, off):
        await ensure_relay(dev_env.client, off)
        await settled(db, queued.welcome_key, "aborted")
        # The row says aborted a moment before its delivery run closes. Let this worker close the run:
        # once it stops, nothing polls for the run's last task until the sticky queue times out, and the
        # requeue below would wait on it.
        await delivery_closed(dev_env.client, queued.welcome_key)
        await dev_env.client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{off.task_queue}").terminate()
    outbox_id = await db.fetchval("SELECT id FROM outbox WHERE idempotency_key = $1", queued.welcome_key)
    entry = await outbox_entry(outbox_id, settings=off)
    assert entry["last_error_code"] == "WELCOME_EMAILS_OFF" and "switched off" in entry["last_error_msg"]
    assert sent_to(mailgun, "queued.before@example.com") == []

    on = outbox_settings()
    async with running_worker(dev_env.client, on):
        await ensure_relay(dev_env.client, on)
        await requeue_outbox_entry(outbox_id, client=dev_env.client, settings=on)
        await settled(db, queued.welcome_key)
        await dev_env.client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{on.task_queue}").terminate()
    assert len(sent_to(mailgun, "queued.before@example.com")) == 1


async def test_welcome_email_switched_off_queues_nothing_for_a_new_member(db, mailgun, outbox_settings):
    added = await add_member("quiet@example.com", welcome=True, settings=outbox_settings(welcome_emails=False))
    assert added.welcome_key is None
    # The member's event is written all the same, saying no welcome is to be sent.
    assert json.loads(await db.fetchval("SELECT payload FROM outbox")) == \
        {"member_id": added.member_id, "welcome": False}


async def test_members_add_sends_no_welcome_unless_asked(db, mailgun, relay):
    """The reference's default: a member added gets no email unless asked (`--welcome`); their
    MemberCreatedEvent is written all the same, saying so, and its delivery sends nothing."""
    await db.execute(WELCOMES)
    env = {"DATABASE_URL": relay.database_url}
    quiet = await asyncio.to_thread(pressroom, "members", "add", "quiet@example.com", env=env)
    assert quiet.returncode == 0, quiet.stderr
    assert "no welcome email (--welcome sends one)" in quiet.stdout
    asked = await asyncio.to_thread(pressroom, "members", "add", "asked@example.com", "--welcome", env=env)
    assert asked.returncode == 0 and "welcome email queued" in asked.stdout, asked.stderr
    entries = {r["email"]: (json.loads(r["payload"])["welcome"], r["idempotency_key"]) for r in await db.fetch(
        "SELECT m.email, o.payload, o.idempotency_key FROM outbox o JOIN members m ON m.id = o.payload->>'member_id'")}
    assert {email: welcome for email, (welcome, _) in entries.items()} == \
        {"quiet@example.com": False, "asked@example.com": True}
    for _, key in entries.values():
        await settled(db, key)
    assert [m.subject for m in sent_to(mailgun, "asked@example.com")] == ["Welcome, free reader"]
    assert sent_to(mailgun, "quiet@example.com") == []

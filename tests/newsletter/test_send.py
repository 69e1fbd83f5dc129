"""Sending a newsletter end to end: real PostgreSQL, a real Temporal server, the simulator over HTTP."""

from __future__ import annotations

import hashlib
import hmac
from collections import Counter
from urllib.parse import parse_qs, urlsplit

import pytest
from temporalio.client import WorkflowFailureError

from operations.newsletter import start_newsletter
from tests.conftest import TEST_LINK_SECRET
from workflows.newsletter import SendNewsletterWorkflow
from workflows.newsletter_models import SendNewsletterInput, newsletter_workflow_id

from .conftest import seed_email


async def run_send(client, settings, email_id: str):
    return await client.execute_workflow(SendNewsletterWorkflow.run, SendNewsletterInput(email_id=email_id),
                                         id=newsletter_workflow_id(email_id), task_queue=settings.task_queue)


def delivered(mailgun, email_id: str) -> Counter:
    """How many times each address was accepted by the simulator for this email."""
    return Counter(address for message in mailgun.messages_for(email_id) for address in message.recipients)


async def test_every_member_gets_exactly_one_message_with_their_own_variables(db, mailgun, ts_worker):
    client, settings = ts_worker
    seeded = await seed_email(db, members=2500)
    outcome = await run_send(client, settings, seeded.email_id)

    assert outcome.status == "submitted" and outcome.counts.batches_total == 3
    counts = delivered(mailgun, seeded.email_id)
    members = await db.fetch("SELECT m.email, m.uuid, m.name FROM members m JOIN members_newsletters mn "
                             "ON mn.member_id = m.id WHERE mn.newsletter_id = $1", seeded.newsletter_id)
    assert set(counts) == {m["email"] for m in members} and set(counts.values()) == {1}
    variables = {a: v for message in mailgun.messages_for(seeded.email_id)
                 for a, v in message.recipient_variables().items()}
    newsletter_uuid = str(await db.fetchval("SELECT uuid FROM newsletters WHERE id = $1", seeded.newsletter_id))
    for member in members:
        assert variables[member["email"]]["uuid"] == str(member["uuid"])
        assert variables[member["email"]]["name"] == member["name"]
        # The reference platform's link: its key computed here, independently, with the hmac module.
        link = urlsplit(variables[member["email"]]["unsubscribe_url"])
        query = parse_qs(link.query)
        key = hmac.new(TEST_LINK_SECRET.encode("utf-8"), str(member["uuid"]).encode(), hashlib.sha256).hexdigest()
        assert (link.path, query["uuid"], query["key"], query["newsletter"], query["email"]) == (
            "/unsubscribe/", [str(member["uuid"])], [key], [newsletter_uuid], [seeded.email_id])
    message = mailgun.messages_for(seeded.email_id)[0]
    assert "bulk-email" in message.tags and message.variables["email-id"] == seeded.email_id
    assert message.headers["List-Unsubscribe"] == "<%recipient.unsubscribe_url%>"
    assert message.headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    email = await db.fetchrow("SELECT status, email_count, submitted_at, locked_by FROM emails WHERE id = $1",
                              seeded.email_id)
    assert email["status"] == "submitted" and email["email_count"] == 2500 and email["submitted_at"]
    assert await db.fetchval("SELECT count(*) FROM email_recipients WHERE email_id = $1 AND processed_at IS NULL",
                             seeded.email_id) == 0


async def test_a_second_start_does_not_send_again(db, mailgun, ts_worker):
    client, settings = ts_worker
    seeded = await seed_email(db, members=30)
    await run_send(client, settings, seeded.email_id)
    sent = mailgun.stats()["recipients"]

    again = await run_send(client, settings, seeded.email_id)
    assert again.status == "skipped" and "already submitted" in again.message
    from_cli = await start_newsletter(seeded.email_id, client=client, settings=settings)
    assert not from_cli.started and "already sent by run" in from_cli.message
    assert mailgun.stats()["recipients"] == sent


@pytest.mark.parametrize("recipient_filter, expected", [("status:free", 20), ("status:-free", 10),
                                                        ("status:paid,status:comped", 10)])
async def test_recipient_filter_selects_members(db, mailgun, ts_worker, recipient_filter, expected):
    client, settings = ts_worker
    seeded = await seed_email(db, members=30, paid_every=3, recipient_filter=recipient_filter)
    outcome = await run_send(client, settings, seeded.email_id)
    assert outcome.counts.recipients_total == expected == sum(delivered(mailgun, seeded.email_id).values())


async def test_suppressed_disabled_and_newer_members_are_left_out(db, mailgun, ts_worker):
    client, settings = ts_worker
    seeded = await seed_email(db, members=10)
    emails = [r["email"] for r in await db.fetch("SELECT email FROM members ORDER BY email LIMIT 3")]
    await db.execute("INSERT INTO suppressions (email, reason) VALUES ($1, 'bounce')", emails[0])
    await db.execute("UPDATE members SET email_disabled = true WHERE email = $1", emails[1])
    await db.execute("UPDATE members SET created_at = now() + interval '1 minute' WHERE email = $1", emails[2])
    await run_send(client, settings, seeded.email_id)
    counts = delivered(mailgun, seeded.email_id)
    assert len(counts) == 7 and not set(emails) & set(counts)


async def test_segments_get_their_own_body(db, mailgun, ts_worker):
    client, settings = ts_worker
    html = ('<p>All</p><div data-gh-segment="status:free">Upgrade today</div>'
            '<div data-gh-segment="status:-free">Thanks for paying</div>')
    seeded = await seed_email(db, members=6, paid_every=2, html=html)
    await run_send(client, settings, seeded.email_id)
    bodies = {m.subject for m in mailgun.messages_for(seeded.email_id)}
    assert bodies == {"Issue 1"} and len(mailgun.messages_for(seeded.email_id)) == 2
    segments = await db.fetch("SELECT DISTINCT member_segment FROM email_batches WHERE email_id = $1",
                              seeded.email_id)
    assert {r["member_segment"] for r in segments} == {"status:free", "status:-free"}


@pytest.mark.parametrize("setup, words", [
    ("unknown", "does not exist"),
    ("bad_filter", "unknown term 'flavour'"),
    ("missing_label", "names no label vip"),
    ("no_subscribers", "has no subscribers"),
])
async def test_bad_input_ends_with_a_reason_and_no_write(db, mailgun, ts_worker, setup, words):
    """Refused before anything is written; an email that exists ends failed with the reason."""
    client, settings = ts_worker
    email_id = "no-such-email"
    if setup != "unknown":
        recipient_filter = {"bad_filter": "flavour:vanilla", "missing_label": "label:vip"}.get(setup, "all")
        seeded = await seed_email(db, members=0 if setup == "no_subscribers" else 5, recipient_filter=recipient_filter)
        email_id = seeded.email_id
    with pytest.raises(WorkflowFailureError) as failed:
        await run_send(client, settings, email_id)
    assert words in str(failed.value.cause)
    assert await db.fetchval("SELECT count(*) FROM email_batches") == 0
    assert await db.fetchval("SELECT count(*) FROM email_recipients") == 0
    if setup != "unknown":
        email = await db.fetchrow("SELECT status, error, locked_by FROM emails WHERE id = $1", email_id)
        assert email["status"] == "failed" and words in email["error"] and email["locked_by"] is None
    assert mailgun.stats()["messages"] == 0


async def test_a_batch_whose_members_were_all_deleted_sends_nothing_and_the_rest_go_out(
        db, mailgun, time_skipping_env, newsletter_settings):
    """Members deleted after their batch was written leave it empty: it is closed without a provider
    call (a message with no recipient is refused), and the email's other batches are sent."""
    from temporalio.testing import ActivityEnvironment

    from activities.newsletter.batches import BatchCreationActivities
    from activities.newsletter.models import CreateBatchesInput
    from operations.members import delete_member
    from pressroom.dependencies import Dependencies
    from worker import running_worker

    settings = newsletter_settings(batch_size=5)
    seeded = await seed_email(db, members=15)
    creation = BatchCreationActivities(Dependencies(settings=settings, pool=db, provider=None, temporal=None))
    await ActivityEnvironment().run(creation.create_batches,
                                    CreateBatchesInput(email_id=seeded.email_id, retry_failed=False))
    emptied = await db.fetchval("SELECT min(batch_id) FROM email_recipients WHERE email_id = $1", seeded.email_id)
    for member_id in await db.fetch("SELECT member_id FROM email_recipients WHERE batch_id = $1", emptied):
        await delete_member(member_id["member_id"], settings=settings)

    async with running_worker(time_skipping_env.client, settings):
        outcome = await run_send(time_skipping_env.client, settings, seeded.email_id)

    assert outcome.status == "submitted"
    assert sum(delivered(mailgun, seeded.email_id).values()) == 10 and len(mailgun.messages_for(seeded.email_id)) == 2
    assert await db.fetchval("SELECT status FROM email_batches WHERE id = $1", emptied) == "submitted"

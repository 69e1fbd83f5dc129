"""Resubscribing: a member who complained or unsubscribed, subscribed again by the site, is taken off
Mailgun's suppression lists (through Mailgun's API) and Pressroom's, and gets the next email."""

from __future__ import annotations

import pytest

from operations.members import resubscribe_member
from pressroom.errors import NotFound
from workflows.newsletter import SendNewsletterWorkflow
from workflows.newsletter_models import SendNewsletterInput, newsletter_workflow_id

from .conftest import seed_email
from .test_send import delivered


async def test_a_member_resubscribed_after_a_complaint_is_taken_off_mailguns_lists_and_mailed_again(
        db, mailgun, ts_worker):
    client, settings = ts_worker
    seeded = await seed_email(db, members=3)
    member = await db.fetchrow("SELECT id, email FROM members ORDER BY email LIMIT 1")
    await db.execute("INSERT INTO suppressions (email, reason) VALUES ($1, 'spam')", member["email"])
    mailgun.suppress("complaints", member["email"])
    mailgun.suppress("unsubscribes", member["email"])

    done = await resubscribe_member(member["id"], settings=settings)
    assert done.removed == {settings.mailgun_domain: ["unsubscribes", "complaints"]} and done.suppression == "spam"
    assert not any(member["email"] in entries for entries in mailgun.suppressed.values())
    assert await db.fetchval("SELECT count(*) FROM suppressions WHERE email = $1", member["email"]) == 0

    again = await resubscribe_member(member["id"], settings=settings)  # safe to repeat
    assert again.removed == {settings.mailgun_domain: []} and again.suppression is None

    outcome = await client.execute_workflow(SendNewsletterWorkflow.run, SendNewsletterInput(email_id=seeded.email_id),
                                            id=newsletter_workflow_id(seeded.email_id), task_queue=settings.task_queue)
    assert outcome.status == "submitted"
    assert delivered(mailgun, seeded.email_id).get(member["email"]) == 1


async def test_resubscribing_an_unknown_member_writes_nothing(db, mailgun, newsletter_settings):
    with pytest.raises(NotFound, match="member no-such-member does not exist"):
        await resubscribe_member("no-such-member", settings=newsletter_settings())
    assert mailgun.stats()["requests"].get("suppressions", 0) == 0

"""A send watches its own early figures: when the provider's pushed answers show a bounce storm, the
send pauses itself between batches, says why, survives a worker's restart, and an operator either
resumes it (everyone else once) or cancels it (nobody more). Real simulator, receiver, inbox and
Temporal dev server."""

from __future__ import annotations

import pytest

from operations.newsletter import cancel_newsletter, newsletter_status, resume_newsletter
from operations.webhooks import webhooks_setup
from tests.newsletter.conftest import seed_email
from tests.newsletter.test_failures import assert_each_member_once
from tests.newsletter.test_send import delivered
from worker import running_worker
from workflows.newsletter import SendNewsletterWorkflow
from workflows.newsletter_models import SendNewsletterInput, newsletter_workflow_id

from .conftest import eventually, start_inbox
from .test_push import stop_inbox

MEMBERS = 3000


def storm_settings(webhook_settings):
    """Small batches one at a time, each answered slowly, so that the first answers come back while
    most of the email is still to send; rates read every second."""
    return webhook_settings.model_copy(update={
        "batch_size": 50, "send_concurrency": 1, "pause_min_answered": 200, "pause_hard_bounce_rate": 0.05,
        "reputation_check_seconds": 1.0})


async def paused_send(dev_env, db, mailgun, receiver, settings):
    seeded = await seed_email(db, members=MEMBERS)
    mailgun.set_rates(failed_permanent=0.2)
    mailgun.set_faults(latency_ms=400)
    await webhooks_setup(receiver.url, settings)
    handle = await dev_env.client.start_workflow(
        SendNewsletterWorkflow.run, SendNewsletterInput(email_id=seeded.email_id),
        id=newsletter_workflow_id(seeded.email_id), task_queue=settings.task_queue)

    async def paused():
        return (await handle.query(SendNewsletterWorkflow.progress)).status == "paused"
    assert await eventually(paused, seconds=120), "the storm did not pause the send"
    return seeded.email_id, handle


@pytest.mark.slow
async def test_a_bounce_storm_pauses_the_send_and_a_resume_sends_everyone_else_once(
        dev_env, db, mailgun, receiver, webhook_settings):
    settings = storm_settings(webhook_settings)
    try:
        async with running_worker(dev_env.client, settings):
            await start_inbox(dev_env, settings)
            email_id, handle = await paused_send(dev_env, db, mailgun, receiver, settings)
            progress = await handle.query(SendNewsletterWorkflow.progress)
            assert progress.message.startswith("paused: hard bounces at ")
            assert progress.batches_sent < progress.batches_total, "paused before the end"
            row = await db.fetchrow("SELECT status, paused_at, paused_reason FROM emails WHERE id = $1", email_id)
            assert row["status"] == "submitting" and row["paused_at"] is not None
            assert row["paused_reason"].startswith("hard bounces at ")
            status = await newsletter_status(email_id, client=dev_env.client, settings=settings)
            assert status.status == "paused" and (status.error or "").startswith("paused: hard bounces at ")
        sent_while_paused = len(delivered(mailgun, email_id))

        # A new worker (the first one stopped while paused): still paused, nothing more sent.
        async with running_worker(dev_env.client, settings):
            assert (await handle.query(SendNewsletterWorkflow.progress)).status == "paused"
            assert len(delivered(mailgun, email_id)) == sent_while_paused
            mailgun.set_faults(latency_ms=0)
            resumed = await resume_newsletter(email_id, by="editor", client=dev_env.client, settings=settings)
            assert resumed.status == "resumed"
            outcome = await handle.result()
            assert outcome.status == "submitted"
            again = await resume_newsletter(email_id, by="editor", client=dev_env.client, settings=settings)
            assert again.status == "not-paused"
    finally:
        await stop_inbox(dev_env, settings)
    await assert_each_member_once(db, mailgun, email_id)
    assert await db.fetchval("SELECT paused_at FROM emails WHERE id = $1", email_id) is None


@pytest.mark.slow
async def test_a_paused_send_cancelled_sends_nobody_more(dev_env, db, mailgun, receiver, webhook_settings):
    settings = storm_settings(webhook_settings)
    try:
        async with running_worker(dev_env.client, settings):
            await start_inbox(dev_env, settings)
            email_id, _handle = await paused_send(dev_env, db, mailgun, receiver, settings)
            sent_at_pause = len(delivered(mailgun, email_id))
            cancel = await cancel_newsletter(email_id, by="editor", wait=True, client=dev_env.client,
                                             settings=settings)
            assert cancel.status == "cancelled"
    finally:
        await stop_inbox(dev_env, settings)
    counts = delivered(mailgun, email_id)
    assert [a for a, n in counts.items() if n > 1] == [], "second copies"
    assert len(counts) == sent_at_pause < MEMBERS, "nothing sent after the pause"

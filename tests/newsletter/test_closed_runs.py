"""An email never stays `submitting` for ever: however its send's run closes without finishing it
(failed after its retries, terminated, timed out, cancelled), the watchdog beside the outbox relay
marks it `failed` with the run's reason and releases its lock; sending it again sends what is left."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.testing import ActivityEnvironment

from activities.newsletter.finish import UNFINISHED_EMAILS
from activities.watchdog import SEND_FAILED, Watchdog
from operations.newsletter import follow_newsletter, newsletter_status
from operations.outbox import ensure_relay
from pressroom.errors import PressroomError
from tests.newsletter.test_failures import send_and_follow, wait_until
from tests.outbox.test_orphans import stop_relay
from worker import running_worker
from workflows.newsletter import SendNewsletterWorkflow
from workflows.newsletter_models import SendNewsletterInput, newsletter_workflow_id

from .conftest import seed_email
from .test_send import delivered

CHECK_SEC = 0.5


async def failing_trigger(db, message: str) -> None:
    """Every batch written from now on fails with `message`, as a database fault would."""
    await db.execute(f"""
        CREATE OR REPLACE FUNCTION refuse_batches() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION '{message}'; END $$;
        DROP TRIGGER IF EXISTS refuse_batches ON email_batches;
        CREATE TRIGGER refuse_batches BEFORE INSERT ON email_batches FOR EACH ROW EXECUTE FUNCTION refuse_batches();""")


async def drop_failing_trigger(db) -> None:
    await db.execute("DROP TRIGGER IF EXISTS refuse_batches ON email_batches")


async def email_row(db, email_id: str):
    return await db.fetchrow("SELECT status, error, locked_by FROM emails WHERE id = $1", email_id)


async def failed_by_watchdog(db, email_id: str, timeout: float = 60):
    async def failed() -> bool:
        return (await email_row(db, email_id))["status"] == "failed"
    await wait_until(failed, timeout=timeout)
    return await email_row(db, email_id)


@pytest.mark.parametrize("message, stored", [("Unexpected test error", "Unexpected test error"),
                                             ("", SEND_FAILED)])
async def test_batch_creation_failing_on_every_attempt_fails_the_email_with_its_error(
        db, db_pool, mailgun, ts_worker, message, stored):
    client, settings = ts_worker
    seeded = await seed_email(db, members=5)
    await failing_trigger(db, message)
    try:
        with pytest.raises(WorkflowFailureError):  # after every retry: the time-skipping server skips the waits
            await client.execute_workflow(SendNewsletterWorkflow.run, SendNewsletterInput(email_id=seeded.email_id),
                                          id=newsletter_workflow_id(seeded.email_id), task_queue=settings.task_queue)
    finally:
        await drop_failing_trigger(db)
    assert (await email_row(db, seeded.email_id))["status"] == "submitting"  # what the run left behind
    if message:  # `newsletter follow` names the database's error, not "Activity task failed"
        with pytest.raises(PressroomError, match=f"failed: {message}$"):
            await follow_newsletter(newsletter_workflow_id(seeded.email_id), client=client)

    watchdog = Watchdog(db_pool, client, interval=0)
    await ActivityEnvironment().run(watchdog.check, UNFINISHED_EMAILS)
    email = await email_row(db, seeded.email_id)
    assert (email["status"], email["error"], email["locked_by"]) == ("failed", stored, None)

    # Sent again, it sends everyone once.
    outcome = await client.execute_workflow(
        SendNewsletterWorkflow.run, SendNewsletterInput(email_id=seeded.email_id),
        id=newsletter_workflow_id(seeded.email_id), task_queue=settings.task_queue)
    assert outcome.status == "submitted"
    assert len(delivered(mailgun, seeded.email_id)) == 5


async def sending_slowly(db, mailgun, dev_env, settings, **start_options):
    """A send of 4 batches whose Mailgun requests take 3 s each (under the confirm window, so that
    sending again finds an interrupted one in Mailgun's events instead of sending it twice): returns
    its handle once the email is `submitting` and a batch is in flight."""
    seeded = await seed_email(db, members=8)
    mailgun.set_faults(latency_ms=3_000)
    handle = await dev_env.client.start_workflow(
        SendNewsletterWorkflow.run, SendNewsletterInput(email_id=seeded.email_id),
        id=newsletter_workflow_id(seeded.email_id), task_queue=settings.task_queue, **start_options)

    async def in_flight() -> bool:
        return bool(await db.fetchval("SELECT count(*) FROM email_batches WHERE email_id = $1 "
                                      "AND status = 'submitting'", seeded.email_id))
    await wait_until(in_flight, timeout=60)
    return seeded, handle


@pytest.mark.parametrize("how", ["terminated", "timed out", "cancelled"])
async def test_a_send_terminated_timed_out_or_cancelled_fails_the_email_and_sending_again_finishes_it(
        db, mailgun, dev_env, newsletter_settings, how):
    settings = newsletter_settings(batch_size=2, send_concurrency=1, orphan_check_seconds=CHECK_SEC)
    async with running_worker(dev_env.client, settings):
        await ensure_relay(dev_env.client, settings)  # the watchdog runs beside it
        # Long enough for a batch to go out on a busy machine, shorter than the four 3 s batches.
        options = {"execution_timeout": timedelta(seconds=8)} if how == "timed out" else {}
        seeded, handle = await sending_slowly(db, mailgun, dev_env, settings, **options)
        if how == "terminated":
            await handle.terminate(reason="an operator stops it")
        elif how == "cancelled":
            await handle.cancel()
        email = await failed_by_watchdog(db, seeded.email_id)
        closed_as = {"terminated": "TERMINATED (an operator stops it)", "timed out": "TIMED_OUT",
                     "cancelled": "CANCELED"}[how]
        assert email["error"].startswith(f"{SEND_FAILED}: its send (workflow {handle.id}) closed as {closed_as}")
        assert email["locked_by"] is None
        status = await newsletter_status(seeded.email_id, client=dev_env.client, settings=settings)
        assert status.status == "failed" and status.error == email["error"]

        mailgun.set_faults(latency_ms=0)
        outcome, _ = await send_and_follow(dev_env.client, settings, seeded.email_id)
        await stop_relay(dev_env.client, settings)
    assert outcome.status == "submitted"
    counts = delivered(mailgun, seeded.email_id)
    assert len(counts) == 8 and set(counts.values()) == {1}


async def test_a_send_still_running_is_left_alone(db, mailgun, dev_env, newsletter_settings):
    settings = newsletter_settings(batch_size=4, send_concurrency=1, orphan_check_seconds=CHECK_SEC)
    async with running_worker(dev_env.client, settings):
        await ensure_relay(dev_env.client, settings)
        seeded = await seed_email(db, members=8)
        mailgun.set_faults(latency_ms=4_000)
        seen: set[str] = set()

        async def watch_statuses() -> None:
            while True:
                seen.add((await email_row(db, seeded.email_id))["status"])
                await asyncio.sleep(0.05)

        watching = asyncio.create_task(watch_statuses())
        try:
            outcome, _ = await send_and_follow(dev_env.client, settings, seeded.email_id)  # checked many times
        finally:
            watching.cancel()
        await stop_relay(dev_env.client, settings)
    assert outcome.status == "submitted"
    assert "submitting" in seen and "failed" not in seen
    assert (await email_row(db, seeded.email_id))["status"] == "submitted"


async def test_a_post_moved_back_to_draft_mid_send_is_not_mailed_any_further(db, mailgun, dev_env, newsletter_settings):
    settings = newsletter_settings(batch_size=2, send_concurrency=1)
    async with running_worker(dev_env.client, settings):
        seeded, handle = await sending_slowly(db, mailgun, dev_env, settings)
        await db.execute("UPDATE posts SET status = 'draft' WHERE id = $1", seeded.post_id)
        outcome = await handle.result()
    assert outcome.status == "failed"
    sent = await db.fetchval("SELECT count(*) FROM email_batches WHERE email_id = $1 AND status = 'submitted'",
                             seeded.email_id)
    assert sent <= 1  # at most the batch in flight when the post went back to draft
    assert outcome.message.startswith(f"The email was stopped: its post {seeded.post_id} is draft, no longer "
                                      f"published; {sent} of 4 batches had been sent and nothing more is.")
    assert (await email_row(db, seeded.email_id))["error"] == outcome.message
    assert len(mailgun.messages_for(seeded.email_id)) == sent


async def test_a_send_taken_over_after_its_post_moved_back_to_draft_sends_nothing(db, mailgun, ts_worker):
    client, settings = ts_worker
    seeded = await seed_email(db, members=6)
    # A sender that died mid-send: its lock names a run Temporal does not know; its post is a draft again.
    await db.execute("UPDATE emails SET status = 'submitting', locked_by = $2 WHERE id = $1", seeded.email_id,
                     f"default/{newsletter_workflow_id(seeded.email_id)}/{uuid.uuid4()}")
    await db.execute("UPDATE posts SET status = 'draft' WHERE id = $1", seeded.post_id)
    with pytest.raises(WorkflowFailureError) as failure:
        await client.execute_workflow(SendNewsletterWorkflow.run, SendNewsletterInput(email_id=seeded.email_id),
                                      id=newsletter_workflow_id(seeded.email_id), task_queue=settings.task_queue)
    reason = (f"The email is not sent: its post {seeded.post_id} is draft, no longer published. "
              "Publish the post again, then send it.")
    assert failure.value.cause.message == reason
    email = await email_row(db, seeded.email_id)
    assert (email["status"], email["error"], email["locked_by"]) == ("failed", reason, None)
    assert mailgun.messages_for(seeded.email_id) == []

"""Another sender's lock on an email, and the delivery window: on the real Temporal dev server."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

import pytest
from temporalio.client import WorkflowFailureError

from worker import running_worker

from .conftest import seed_email
from .test_send import delivered, run_send


@pytest.fixture
async def dev_worker(dev_env, newsletter_settings):
    settings = newsletter_settings()
    async with running_worker(dev_env.client, settings):
        yield dev_env.client, settings


async def other_sender(client) -> tuple[str, str]:
    """A run in this namespace that stays open (no worker polls its queue): (workflow id, run id)."""
    workflow_id = f"other-sender-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow("OtherSender", id=workflow_id, task_queue=f"nobody-{workflow_id}")
    return workflow_id, handle.first_execution_run_id


async def lock_by(db, email_id: str, holder: str) -> None:
    await db.execute("UPDATE emails SET status = 'submitting', locked_by = $2 WHERE id = $1", email_id, holder)


async def test_email_submitting_under_another_running_send_is_refused_naming_the_holder(db, mailgun, dev_worker):
    client, settings = dev_worker
    seeded = await seed_email(db, members=5)
    workflow_id, run_id = await other_sender(client)
    holder = f"{client.namespace}/{workflow_id}/{run_id}"
    await lock_by(db, seeded.email_id, holder)
    try:
        with pytest.raises(WorkflowFailureError) as refused:
            await run_send(client, settings, seeded.email_id)
    finally:
        await client.get_workflow_handle(workflow_id).terminate()
    message = str(refused.value.cause)
    assert f"email {seeded.email_id} is being sent by {holder}, which is still running" in message
    assert mailgun.stats()["messages"] == 0
    email = await db.fetchrow("SELECT status, locked_by FROM emails WHERE id = $1", seeded.email_id)
    assert (email["status"], email["locked_by"]) == ("submitting", holder)
    assert await db.fetchval("SELECT count(*) FROM email_batches") == 0


async def test_email_submitting_under_a_sender_in_another_namespace_is_refused(db, mailgun, dev_worker):
    client, settings = dev_worker
    seeded = await seed_email(db, members=5)
    holder = f"elsewhere/newsletter-{seeded.email_id}/{uuid.uuid4()}"
    await lock_by(db, seeded.email_id, holder)
    with pytest.raises(WorkflowFailureError) as refused:
        await run_send(client, settings, seeded.email_id)
    assert f"is being sent by {holder}, which cannot be checked from namespace {client.namespace}" \
        in str(refused.value.cause)
    assert mailgun.stats()["messages"] == 0


async def test_email_submitting_under_a_closed_send_is_taken_over_and_says_so(db, mailgun, dev_worker, caplog):
    caplog.set_level(logging.WARNING)
    client, settings = dev_worker
    seeded = await seed_email(db, members=5)
    workflow_id, run_id = await other_sender(client)
    await client.get_workflow_handle(workflow_id).terminate()
    holder = f"{client.namespace}/{workflow_id}/{run_id}"
    await lock_by(db, seeded.email_id, holder)
    outcome = await run_send(client, settings, seeded.email_id)
    assert outcome.status == "submitted" and sum(delivered(mailgun, seeded.email_id).values()) == 5
    assert f"took over email {seeded.email_id} from {holder}, which is closed (terminated)" in caplog.text


@pytest.mark.parametrize("written_by", ["0.1.0", "this release"])
async def test_email_submitting_under_a_run_not_found_in_this_namespace_is_taken_over(db, mailgun, dev_worker,
                                                                                     caplog, written_by):
    """0.1.0 stored the bare first run id of newsletter-{email_id}; this release qualifies it."""
    caplog.set_level(logging.WARNING)
    client, settings = dev_worker
    seeded = await seed_email(db, members=5)
    run_id = str(uuid.uuid4())
    holder = run_id if written_by == "0.1.0" else f"{client.namespace}/newsletter-{seeded.email_id}/{run_id}"
    await lock_by(db, seeded.email_id, holder)
    outcome = await run_send(client, settings, seeded.email_id)
    assert outcome.status == "submitted" and sum(delivered(mailgun, seeded.email_id).values()) == 5
    assert f"from {holder}, which is not found in namespace {client.namespace}" in caplog.text


async def test_delivery_window_is_spread_from_the_start_of_a_late_send(db, mailgun, dev_env, newsletter_settings):
    """The reference spreads batches up to the email's created_at + window: a send started late
    would get its whole window in the past. Pressroom spreads from the start of the send."""
    window = 3600
    settings = newsletter_settings(batch_size=2, delivery_window_seconds=window)
    seeded = await seed_email(db, members=10)
    await db.execute("UPDATE members SET created_at = now() - interval '3 days'")
    await db.execute("UPDATE emails SET created_at = now() - interval '2 days' WHERE id = $1", seeded.email_id)
    started = datetime.now(UTC).timestamp()
    async with running_worker(dev_env.client, settings):
        outcome = await run_send(dev_env.client, settings, seeded.email_id)
    assert outcome.status == "submitted" and outcome.counts.batches_total == 5
    batches = {r["provider_id"]: r["id"] for r in await db.fetch(
        "SELECT id, provider_id FROM email_batches WHERE email_id = $1", seeded.email_id)}
    times = [m.delivery_time for m in sorted(mailgun.messages_for(seeded.email_id), key=lambda m: batches[m.id])]
    assert all(t is not None for t in times)
    # Batch n of 5 is due n/5 of the window after the start (RFC 2822 times are whole seconds).
    for number, due in enumerate(times):
        assert started - 1 + window * number / 5 <= due <= started + 60 + window * number / 5
    assert times == sorted(times) and times[-1] - times[0] >= window * 4 / 5 - 1

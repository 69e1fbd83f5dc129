"""`newsletter cancel`: a send stops between batches, on the real dev server with a slowed provider."""

from __future__ import annotations

import json

import pytest
from temporalio.worker import Replayer

from operations.newsletter import cancel_newsletter, newsletter_status, start_newsletter
from operations.reports import newsletter_report
from pressroom.errors import BadInput
from pressroom.temporal import data_converter
from worker import running_worker
from workflows.newsletter import SendNewsletterWorkflow

from .conftest import seed_email
from .test_failures import wait_until
from .test_send import delivered


async def submitted_batches(db, email_id: str) -> int:
    return await db.fetchval("SELECT count(*) FROM email_batches WHERE email_id = $1 AND status = 'submitted'",
                             email_id)


async def test_cancel_mid_send_stops_between_batches_and_keeps_what_was_sent(db, mailgun, dev_env,
                                                                            newsletter_settings):
    settings = newsletter_settings(batch_size=5, send_concurrency=1)
    seeded = await seed_email(db, members=60)  # 12 batches
    mailgun.set_faults(latency_ms=400)  # each batch takes 0.4 s at the provider
    client = dev_env.client
    async with running_worker(client, settings):
        start = await start_newsletter(seeded.email_id, client=client, settings=settings)

        async def two_sent() -> bool:
            return await submitted_batches(db, seeded.email_id) >= 2
        await wait_until(two_sent, 60)
        before = await submitted_batches(db, seeded.email_id)
        cancel = await cancel_newsletter(seeded.email_id, by="ops-on-call", wait=True, client=client,
                                         settings=settings)
        after = await submitted_batches(db, seeded.email_id)
        history = await client.get_workflow_handle(start.workflow_id).fetch_history()
    mailgun.set_faults(latency_ms=0)

    # At most the one batch in flight when the cancel came was sent after it; none started later.
    assert before <= after <= before + settings.send_concurrency < 12
    assert cancel.status == "cancelled" and cancel.by == "ops-on-call" and cancel.at is not None
    counts = delivered(mailgun, seeded.email_id)
    assert len(counts) == after * 5 and set(counts.values()) == {1}
    email = await db.fetchrow("SELECT status, cancelled_by, cancelled_at, locked_by, error FROM emails WHERE id = $1",
                              seeded.email_id)
    assert email["status"] == "cancelled" and email["cancelled_by"] == "ops-on-call" and email["locked_by"] is None
    assert f"{after} of 12 batches had been sent" in email["error"]

    report = await newsletter_report(seeded.email_id, settings=settings)
    assert report.status == "cancelled" and report.cancelled_by == "ops-on-call"
    assert report.sent == after * 5 and report.recipients == 60
    status = await newsletter_status(seeded.email_id, client=client, settings=settings)
    assert status.status == "cancelled" and status.batches.submitted == after
    assert status.run is not None and status.run.status == "completed"

    # Safe to repeat: the same answer, nothing changes; and the email is not sent again.
    again = await cancel_newsletter(seeded.email_id, by="someone-else", client=client, settings=settings)
    assert (again.status, again.by, again.at) == ("cancelled", "ops-on-call", email["cancelled_at"])
    with pytest.raises(BadInput, match="was cancelled"):
        await start_newsletter(seeded.email_id, client=client, settings=settings)
    await Replayer(workflows=[SendNewsletterWorkflow], data_converter=data_converter()).replay_workflow(history)


async def test_cancel_before_any_send_keeps_the_email_from_going_out(db, mailgun, dev_env, settings):
    seeded = await seed_email(db, members=3)
    cancel = await cancel_newsletter(seeded.email_id, by="ops", client=dev_env.client, settings=settings)
    assert cancel.status == "cancelled"
    assert await db.fetchval("SELECT status FROM emails WHERE id = $1", seeded.email_id) == "cancelled"
    with pytest.raises(BadInput, match="was cancelled"):
        await start_newsletter(seeded.email_id, client=dev_env.client, settings=settings)
    assert not delivered(mailgun, seeded.email_id)

    # The command, again: safe to repeat, its --json the same answer.
    from tests.operations.test_waiting import cli, cli_env

    code, out, err = await cli("newsletter", "cancel", seeded.email_id, "--by", "someone", "--json",
                               env=cli_env(settings, dev_env))
    assert code == 0, err
    answer = json.loads(out)
    assert answer["status"] == "cancelled" and answer["cancelled_by"] == "ops" and answer["cancelled_at"]


async def test_cancel_of_a_sent_email_is_refused(db, mailgun, dev_env, settings):
    seeded = await seed_email(db, members=2)
    await db.execute("UPDATE emails SET status = 'submitted', submitted_at = now() WHERE id = $1", seeded.email_id)
    with pytest.raises(BadInput, match="already sent"):
        await cancel_newsletter(seeded.email_id, client=dev_env.client, settings=settings)


async def test_cancel_ends_a_send_waiting_for_tomorrows_cap_now(db, mailgun, dev_env, newsletter_settings):
    """A send waiting hours for its daily cap's next window stops when cancelled, not when the window comes."""
    from workflows.newsletter import SendNewsletterWorkflow as Send

    settings = newsletter_settings(batch_size=100, daily_send_limit="200")
    seeded = await seed_email(db, members=500)
    client = dev_env.client
    async with running_worker(client, settings):
        start = await start_newsletter(seeded.email_id, client=client, settings=settings)
        handle = client.get_workflow_handle(start.workflow_id)

        async def waiting_for_the_cap() -> bool:
            return (await handle.query(Send.progress)).message.startswith("waiting for the daily limit")
        await wait_until(waiting_for_the_cap, 60)
        cancel = await cancel_newsletter(seeded.email_id, by="ops", wait=True, client=client, settings=settings)
        history = await handle.fetch_history()

    assert cancel.status == "cancelled"
    sent = sum(delivered(mailgun, seeded.email_id).values())
    assert sent == 200 == await submitted_batches(db, seeded.email_id) * 100
    assert await db.fetchval("SELECT status FROM emails WHERE id = $1", seeded.email_id) == "cancelled"
    await Replayer(workflows=[SendNewsletterWorkflow], data_converter=data_converter()).replay_workflow(history)


async def test_cancel_by_an_address_is_accepted_and_records_no_address(db, mailgun, dev_env, settings, caplog):
    from operations.newsletter import UNRECORDED_ADDRESS
    from operations.staff import add_staff

    staff = await add_staff("Editor@Example.com", "correct horse battery", settings=settings)
    first, second = await seed_email(db, members=2), await seed_email(db, members=2)
    caplog.set_level("DEBUG")
    by_staff = await cancel_newsletter(first.email_id, by="editor@example.com", client=dev_env.client,
                                       settings=settings)
    by_other = await cancel_newsletter(second.email_id, by="someone@elsewhere.example", client=dev_env.client,
                                       settings=settings)
    assert by_staff.status == by_other.status == "cancelled"
    assert by_staff.by == staff.staff_id and by_other.by == UNRECORDED_ADDRESS  # as the dashboard records a cancel
    recorded = [r["cancelled_by"] for r in await db.fetch("SELECT cancelled_by FROM emails ORDER BY cancelled_by")]
    assert all("@" not in (who or "") for who in recorded)
    assert "@example.com" not in caplog.text.lower() and "elsewhere.example" not in caplog.text

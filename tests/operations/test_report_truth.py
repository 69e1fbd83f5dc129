"""The figures an operator reads agree: rates are over the recipients sent to (a cancelled email's
report does not count those never sent as not delivered), and the batches are counted by one
function wherever they are shown (status, the cancel's and the finish's messages)."""

from __future__ import annotations

from temporalio.testing import ActivityEnvironment

from activities.newsletter.batches import BatchCreationActivities
from activities.newsletter.counts import batch_counts
from activities.newsletter.models import CreateBatchesInput
from operations.newsletter import newsletter_status
from operations.reports import newsletter_report
from pressroom.dependencies import Dependencies
from tests.conftest import make_settings
from tests.newsletter.conftest import seed_email


async def written(db, settings, members: int) -> str:
    """An email of `members` members with its batches written (of 10), none sent yet."""
    seeded = await seed_email(db, members=members)
    activities = BatchCreationActivities(Dependencies(settings=settings, pool=db, provider=None, temporal=None))
    await ActivityEnvironment().run(activities.create_batches,
                                    CreateBatchesInput(email_id=seeded.email_id, retry_failed=False))
    return seeded.email_id


async def test_a_cancelled_emails_rates_are_over_the_recipients_it_was_sent_to(db, postgres_url, mailgun):
    settings = make_settings(postgres_url, mailgun, batch_size=10)
    email_id = await written(db, settings, 30)
    first = await db.fetchval("SELECT id FROM email_batches WHERE email_id = $1 ORDER BY id LIMIT 1", email_id)
    await db.execute("UPDATE email_batches SET status = 'submitted', send_outcome = 'accepted', "
                     "provider_id = '<m@mg>' WHERE id = $1", first)
    await db.execute("UPDATE email_recipients SET delivered_at = now() WHERE batch_id = $1 AND id <> "
                     "(SELECT min(id) FROM email_recipients WHERE batch_id = $1)", first)
    await db.execute("UPDATE emails SET status = 'cancelled', delivered_count = 9, opened_count = 3 WHERE id = $1",
                     email_id)

    report = (await newsletter_report(email_id, settings=settings)).model_dump()
    assert (report["recipients"], report["sent"], report["delivered"]) == (30, 10, 9)
    assert report["rates"]["delivered"] == 90.0 and report["rates"]["opened"] == 30.0


async def test_status_counts_the_batches_as_the_run_and_its_cancel_do(db, postgres_url, mailgun, dev_env):
    settings = make_settings(postgres_url, mailgun, batch_size=10,
                             temporal_address=dev_env.client.service_client.config.target_host)
    email_id = await written(db, settings, 30)
    # A batch split into pieces (a provider's size refusal) is retired: its pieces are the batches now.
    await db.execute("INSERT INTO email_batches (email_id, status) VALUES ($1, 'retired')", email_id)
    async with db.acquire() as conn:
        counted = await batch_counts(conn, email_id)
    status = (await newsletter_status(email_id, settings=settings)).model_dump()
    assert counted.batches_total == 3
    assert status["batches"] == {"total": counted.batches_total, "submitted": counted.batches_submitted,
                                 "failed": counted.batches_failed}

"""Retention: an email older than the retention period has its recipient rows folded into its figures
and its members', then dropped; `newsletter report`, `newsletter list`, `members show` and the
figures analytics recounts read the same before and after (docs/production.md "Retention")."""

from __future__ import annotations

import json

import pytest

from activities.delivery_events.aggregates import aggregate
from activities.retention import RetentionInput
from operations.members import member_profile
from operations.reports import left_out_members, newsletter_report, sent_counts
from operations.retention import retention_status, run_retention
from pressroom.errors import BadInput
from pressroom.settings import ConfigurationError, load_settings
from tests.foundation.test_cli import pressroom
from tests.newsletter.conftest import seed_email
from tests.newsletter.test_send import run_send
from workflows.retention import RecipientRetentionWorkflow

MEMBERS = 30


async def read_everything(db, settings, email_id: str, member_ids: list[str]) -> dict:
    report = (await newsletter_report(email_id, settings=settings)).model_dump(mode="json")
    profiles = [await member_profile(member_id, emails=0, settings=settings) for member_id in member_ids]
    return {"report": report, "sent": await sent_counts([email_id], settings=settings),
            "members": [(p.email_count, p.email_opened_count, p.email_open_rate) for p in profiles],
            "email": dict(await db.fetchrow("SELECT delivered_count, opened_count, failed_count, email_count, "
                                            "first_opened_at, last_opened_at FROM emails WHERE id = $1", email_id))}


async def recount(db, email_id: str) -> None:
    """Analytics' recount of the email and every member, as after an event about them."""
    await db.execute("INSERT INTO email_analytics_dirty_emails (email_id) VALUES ($1) ON CONFLICT DO NOTHING",
                     email_id)
    await db.execute("INSERT INTO email_analytics_dirty_members (member_id) SELECT id FROM members "
                     "ON CONFLICT DO NOTHING")
    async with db.acquire() as conn:
        await aggregate(conn)


async def test_an_old_emails_rows_are_folded_and_dropped_and_every_report_reads_the_same(db, ts_worker):
    client, settings = ts_worker
    old, new = await seed_email(db, members=MEMBERS), await seed_email(db, members=5)
    for seeded in (old, new):
        assert (await run_send(client, settings, seeded.email_id)).status == "submitted"
    # What analytics would have applied: deliveries, opens over a few hours, one failure, for both emails.
    await db.execute("UPDATE email_recipients SET delivered_at = now() - interval '199 days'")
    await db.execute("UPDATE email_recipients SET opened_at = now() - interval '199 days' "
                     "+ make_interval(mins => (abs(hashtext(id)) % 300)) WHERE abs(hashtext(id)) % 3 = 0")
    await db.execute(
        "INSERT INTO email_recipient_failures (email_id, member_id, email_recipient_id, code, message, severity, "
        "failed_at, event_id) SELECT email_id, member_id, id, 550, 'mailbox unavailable', 'permanent', now(), "
        "'event-' || id FROM email_recipients WHERE email_id = $1 ORDER BY id LIMIT 1", old.email_id)
    await db.execute("UPDATE emails SET submitted_at = now() - interval '200 days', track_opens = true WHERE id = $1",
                     old.email_id)
    await recount(db, old.email_id)
    await recount(db, new.email_id)
    member_ids = [r["id"] for r in await db.fetch("SELECT id FROM members ORDER BY id")]
    before = await read_everything(db, settings, old.email_id, member_ids)
    assert before["report"]["opened"] and before["report"]["failed"] == 1
    assert before["report"]["opens_over_time"]["buckets"]

    folded = await run_retention(settings=settings.model_copy(update={"retention_chunk_rows": 100}))
    # Only the old email, in chunks; the recent one keeps its rows.
    assert (folded.emails_folded, folded.rows_dropped) == (1, MEMBERS)
    assert await db.fetchval("SELECT count(*) FROM email_recipients WHERE email_id = $1", old.email_id) == 0
    assert await db.fetchval("SELECT count(*) FROM email_recipients WHERE email_id = $1", new.email_id) == 5
    assert await read_everything(db, settings, old.email_id, member_ids) == before
    # A later recount (an event about the email or its members) counts what was folded too.
    await recount(db, old.email_id)
    assert await read_everything(db, settings, old.email_id, member_ids) == before
    # Safe to repeat; the members left out are no longer listed, in one line saying why.
    assert (await run_retention(settings=settings)).emails_folded == 0
    with pytest.raises(BadInput, match="older than the retention period"):
        await left_out_members(old.email_id, settings=settings)
    status = await retention_status(settings=settings)
    assert (status["retention_days"], status["emails_folded"], status["emails_due"]) == (180, 1, 0)


async def test_a_retention_too_short_for_the_rates_is_refused_in_one_line():
    with pytest.raises(ConfigurationError, match="PRESSROOM_RECIPIENT_RETENTION_DAYS is invalid: 7 is below 31"):
        load_settings(recipient_retention_days=7)
    assert load_settings(recipient_retention_days=0).recipient_retention_days == 0  # kept for ever


def test_retention_status_answers_json(postgres_url, db):
    result = pressroom("retention", "status", "--json", env={"DATABASE_URL": postgres_url})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["retention_days"] == 180


async def test_the_schedules_run_folds_an_old_email_on_a_worker(db, ts_worker):
    client, settings = ts_worker
    seeded = await seed_email(db, members=3)
    assert (await run_send(client, settings, seeded.email_id)).status == "submitted"
    await db.execute("UPDATE emails SET submitted_at = now() - interval '181 days' WHERE id = $1", seeded.email_id)
    result = await client.execute_workflow(RecipientRetentionWorkflow.run, RetentionInput(),
                                           id=f"recipient-retention-{settings.task_queue}",
                                           task_queue=settings.task_queue)
    assert (result.retention_days, result.emails_folded, result.rows_dropped) == (180, 1, 3)
    assert await db.fetchval("SELECT received FROM member_figures_folded ORDER BY member_id LIMIT 1") == 1

"""A newsletter sent through SES end to end: the real workflow and worker on the time-skipping
server, SES's client against the stand-in, its SNS notifications through the webhook receiver into
PostgreSQL. SES takes 50 destinations a call, so batches ask the provider and are 50 each; a batch
whose answer was lost is confirmed from the Send events received, never sent twice."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.ses_stack import running_ses_stack, subscribed
from tests.webhooks.conftest import eventually
from worker import running_worker

from .conftest import seed_email
from .test_send import run_send


@pytest.fixture
async def ses(postgres_url, mailgun, db, monkeypatch, tmp_path):
    async with running_ses_stack(postgres_url, mailgun, monkeypatch, tmp_path) as stack:
        stack.simulator.auto_push = True
        await subscribed(stack)
        yield stack


@pytest.mark.slow
async def test_each_member_gets_one_message_with_their_own_values_and_headers_even_when_answers_are_lost(
        db, ses, time_skipping_env):
    seeded = await seed_email(db, members=120)
    ses.simulator.set_faults(lost_answers=2, throttled=1, server_errors=1)
    # The stand-in's notifications of the unanswered calls take seconds to come back through the
    # receiver; the window to wait for them must be longer than that, as Mailgun's 30 minutes are.
    settings = ses.settings.model_copy(update={"send_confirm_window_seconds": 30})
    async with running_worker(time_skipping_env.client, settings):
        outcome = await run_send(time_skipping_env.client, settings, seeded.email_id)

    assert outcome.status == "submitted" and outcome.counts.batches_total == 3  # 120 members, 50 a call
    counts = Counter(copy.address for copy in ses.simulator.delivered)
    members = await db.fetch("SELECT m.email, m.uuid, m.name FROM members m JOIN members_newsletters mn "
                             "ON mn.member_id = m.id WHERE mn.newsletter_id = $1", seeded.newsletter_id)
    assert set(counts) == {m["email"] for m in members} and set(counts.values()) == {1}
    copies = {copy.address: copy for copy in ses.simulator.delivered}
    for member in members:
        copy = copies[member["email"]]
        assert member["name"] in copy.html and str(member["uuid"]) in copy.headers["List-Unsubscribe"]
        assert copy.headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
        assert copy.tags["email-id"] and "bulk-email" in copy.tags
    faults = ses.simulator.faults
    assert (faults.lost_answers, faults.throttled, faults.server_errors) == (0, 0, 0)
    # 3 calls accepted (2 of them unanswered, confirmed from their Send events), 1 throttled, 1 failed.
    assert ses.simulator.requests["send"] == 5
    async def all_kept() -> bool:  # the pushes of the batches answered at once may still be on their way
        return await db.fetchval("SELECT count(*) FROM provider_acceptances WHERE marks ->> 'email-id' = $1",
                                 seeded.email_id) == 120
    assert await eventually(all_kept, seconds=30)


async def test_destinations_ses_refuses_in_an_accepted_call_are_recorded_as_those_recipients_failures(
        db, ses, time_skipping_env, caplog):
    from operations.reports import newsletter_report

    seeded = await seed_email(db, members=60)
    members = [r["email"] for r in await db.fetch(
        "SELECT m.email FROM members m JOIN members_newsletters mn ON mn.member_id = m.id "
        "WHERE mn.newsletter_id = $1 ORDER BY m.email", seeded.newsletter_id)]
    refused = {members[3], members[41]}
    ses.simulator.refused = {address.casefold() for address in refused}
    async with running_worker(time_skipping_env.client, ses.settings):
        outcome = await run_send(time_skipping_env.client, ses.settings, seeded.email_id)

    assert outcome.status == "submitted" and outcome.counts.batches_total == 2
    assert {copy.address for copy in ses.simulator.delivered} == set(members) - refused
    failures = await db.fetch(
        "SELECT er.member_email, f.member_id = er.member_id AS same_member, f.code, f.message, f.severity "
        "FROM email_recipient_failures f JOIN email_recipients er ON er.id = f.email_recipient_id "
        "WHERE f.email_id = $1", seeded.email_id)
    assert {f["member_email"] for f in failures} == refused
    assert {(f["same_member"], f["code"], f["message"], f["severity"]) for f in failures} == {
        (True, 0, "SES answered MESSAGE_REJECTED", "permanent")}
    report = await newsletter_report(seeded.email_id, settings=ses.settings)
    assert (report.failed, report.failed_permanent) == (2, 2)
    assert report.top_failures and report.top_failures[0].message == "SES answered MESSAGE_REJECTED"
    logged = caplog.text.casefold()
    assert "recorded as their failures" in logged and not any(a.casefold() in logged for a in refused)


async def test_the_accounts_quota_caps_a_rolling_day_from_what_ses_says_and_a_raised_quota_ends_the_wait(
        db, ses, time_skipping_env):
    import asyncio
    from datetime import timedelta

    from activities.sending_limits import send_caps
    from operations.limits import sending_limits
    from pressroom.providers.port import AccountQuota
    from pressroom.providers.ses import SesClient
    from pressroom.providers.ses.settings import ses_settings
    from workflows.newsletter import SendNewsletterInput, SendNewsletterWorkflow, newsletter_workflow_id

    ses.simulator.max_24_hour_send, ses.simulator.max_send_rate = 120.0, 2.0
    domain = ses.simulator.domain
    shown = {row["domain"]: row for row in await sending_limits(ses.settings)}[domain]
    assert (shown["daily_limit"], shown["hourly_limit"]) == (120, 7200)  # MaxSendRate 2 a second: 7,200 an hour
    assert (shown["account_daily_limit"], shown["account_sent_last_24_hours"]) == (120, 0)
    # A configured cap below the quota wins; -1 (SES's "unlimited") states nothing.
    assert send_caps(ses.settings.model_copy(update={"daily_send_limit": {"*": 100}}), domain,
                     AccountQuota(per_day=120, rate_per_second=2.0)) == {"hour": 7200, "day": 100}
    ses.simulator.max_24_hour_send = -1.0
    fresh = SesClient.from_settings(ses_settings())  # a quota is read once per QUOTA_TTL: a new client reads it
    try:
        assert await fresh.account_quota() == AccountQuota(per_day=None, rate_per_second=2.0)
    finally:
        await fresh.aclose()
    ses.simulator.max_24_hour_send = 120.0
    # Sends of the account's other senders, 20 of them an hour ago: SES counts them, so do we.
    assert not ses.simulator.delivered
    ses.simulator.advance(-3600)
    earlier = await seed_email(db, members=20)
    async with running_worker(time_skipping_env.client, ses.settings):
        await run_send(time_skipping_env.client, ses.settings, earlier.email_id)
    ses.simulator.advance(3600)
    assert ses.simulator.sent_last_24_hours() == 20
    await db.execute("DELETE FROM sending_quota_reservations")  # as if another system had sent them

    seeded = await seed_email(db, members=200)
    client = time_skipping_env.client
    # One batch at a time: what was admitted is sent and recorded before the next admission reads the quota.
    settings = ses.settings.model_copy(update={"send_concurrency": 1, "provider_probe_seconds": 1.0})
    async with running_worker(client, settings):
        handle = await client.start_workflow(
            SendNewsletterWorkflow.run, SendNewsletterInput(email_id=seeded.email_id),
            id=newsletter_workflow_id(seeded.email_id), task_queue=settings.task_queue)
        # Time stands still until the result is awaited: the email waits at the account's quota.
        for _ in range(600):
            progress = await handle.query(SendNewsletterWorkflow.progress)
            if progress.message.startswith("waiting for"):
                break
            await asyncio.sleep(0.1)
        assert progress.message.startswith("waiting for Amazon SES's 24-hour sending quota (120 messages, "
                                           "120 sent in the last 24 hours)"), progress
        mine = [c for c in ses.simulator.delivered if c.tags.get("email-id") == seeded.email_id]
        assert len(mine) == 100 and ses.simulator.sent_last_24_hours() == 120
        before_the_wait = await db.fetchval("SELECT max(reserved_at) FROM sending_quota_reservations "
                                            "WHERE domain = $1", domain)
        ses.simulator.max_24_hour_send = 300.0  # the account's quota raised while the email waits
        outcome = await handle.result()

    mine = [c for c in ses.simulator.delivered if c.tags.get("email-id") == seeded.email_id]
    assert outcome.status == "submitted" and len(mine) == len({c.address for c in mine}) == 200
    reserved = await db.fetch("SELECT reserved_at, sum(recipients) AS n FROM sending_quota_reservations "
                              "WHERE domain = $1 GROUP BY 1 ORDER BY 1", domain)
    later = [r for r in reserved if r["reserved_at"] > before_the_wait]
    assert sum(r["n"] for r in reserved if r not in later) == 100 and sum(r["n"] for r in later) == 100
    # Within a look of the raise, not at the admission's next hourly look.
    assert later[0]["reserved_at"] - before_the_wait < timedelta(minutes=59)


async def test_destinations_ses_throttles_in_an_accepted_call_are_sent_again_once_in_a_new_batch(
        db, ses, time_skipping_env, caplog):
    seeded = await seed_email(db, members=120)
    ses.simulator.set_faults(throttled_destinations=30)  # every other destination of a call, 30 in all
    async with running_worker(time_skipping_env.client, ses.settings):
        outcome = await run_send(time_skipping_env.client, ses.settings, seeded.email_id)

    assert ses.simulator.faults.throttled_destinations == 0 and ses.simulator.requests["refused_for_now"] == 30
    members = {r["email"] for r in await db.fetch(
        "SELECT m.email FROM members m JOIN members_newsletters mn ON mn.member_id = m.id "
        "WHERE mn.newsletter_id = $1", seeded.newsletter_id)}
    counts = Counter(copy.address for copy in ses.simulator.delivered)
    assert set(counts) == members and set(counts.values()) == {1}
    batches = await db.fetch("SELECT id, status, requeued_from, requeue_generation, hold_seconds, "
                             "(SELECT count(*) FROM email_recipients r WHERE r.batch_id = b.id) AS n "
                             "FROM email_batches b WHERE email_id = $1 ORDER BY id", seeded.email_id)
    requeued = [b for b in batches if b["requeued_from"]]
    assert requeued and all(b["requeue_generation"] == 1 and b["id"] == f"{b['requeued_from']}.r1"
                            and b["hold_seconds"] is None for b in requeued)
    assert sum(b["n"] for b in requeued) == 30 and sum(b["n"] for b in batches) == 120
    assert outcome.status == "submitted" and outcome.counts.batches_total == len(batches) == 3 + len(requeued)
    assert outcome.counts.batches_submitted == len(batches) and outcome.counts.recipients_submitted == 120
    assert not await db.fetchval("SELECT count(*) FROM email_recipient_failures WHERE email_id = $1",
                                 seeded.email_id)
    assert "to be sent again in a new batch" in caplog.text


async def test_a_destination_ses_always_refuses_for_the_moment_ends_as_a_recorded_failure_after_the_cap(
        db, ses, time_skipping_env, caplog):
    from activities.newsletter.batch_outcome import REQUEUE_LIMIT
    from operations.reports import newsletter_report

    seeded = await seed_email(db, members=60)
    members = [r["email"] for r in await db.fetch(
        "SELECT m.email FROM members m JOIN members_newsletters mn ON mn.member_id = m.id "
        "WHERE mn.newsletter_id = $1 ORDER BY m.email", seeded.newsletter_id)]
    always = members[7]
    ses.simulator.refused_for_now = {always.casefold()}
    async with running_worker(time_skipping_env.client, ses.settings):
        outcome = await run_send(time_skipping_env.client, ses.settings, seeded.email_id)

    # Its first call and one per generation after it, then no more.
    assert ses.simulator.requests["refused_for_now"] == 1 + REQUEUE_LIMIT
    assert Counter(copy.address for copy in ses.simulator.delivered) == Counter(set(members) - {always})
    assert outcome.status == "submitted"
    generations = await db.fetch("SELECT requeue_generation FROM email_batches WHERE email_id = $1 "
                                 "AND requeued_from IS NOT NULL ORDER BY requeue_generation", seeded.email_id)
    assert [g["requeue_generation"] for g in generations] == list(range(1, REQUEUE_LIMIT + 1))
    failures = await db.fetch(
        "SELECT er.member_email, f.message, f.severity FROM email_recipient_failures f "
        "JOIN email_recipients er ON er.id = f.email_recipient_id WHERE f.email_id = $1", seeded.email_id)
    assert [tuple(f) for f in failures] == [
        (always, f"SES answered TRANSIENT_FAILURE; sent again {REQUEUE_LIMIT} times", "temporary")]
    report = await newsletter_report(seeded.email_id, settings=ses.settings)
    assert (report.failed, report.failed_temporary, report.failed_permanent) == (1, 1, 0)
    assert always.casefold() not in caplog.text.casefold()


def test_a_batch_whose_recipients_were_requeued_grows_the_runs_total(monkeypatch):
    from activities.newsletter.models import BatchSent
    from workflows.newsletter import SendNewsletterWorkflow
    from workflows.newsletter_models import NewsletterProgress

    run = SendNewsletterWorkflow()
    run._progress = NewsletterProgress(email_id="e1", batches_total=3, recipients_total=120)
    monkeypatch.setattr(run, "_show", lambda **_: None)  # the Web UI's line needs a running workflow
    run._batch_sent(BatchSent(batch_id="b1", recipients=25, provider_id="p1", reconciled=False, requeued=1))
    run._batch_sent(BatchSent(batch_id="b1.r1", recipients=25, provider_id="p2", reconciled=False))
    assert (run._progress.batches_total, run._progress.batches_sent, run._progress.recipients_sent) == (4, 2, 50)


async def test_destinations_throttled_in_a_call_whose_answer_was_lost_are_found_missing_and_sent_again_once(
        db, ses, time_skipping_env):
    seeded = await seed_email(db, members=60)
    # The first call: 10 of its destinations throttled, and its answer lost after SES accepted the rest.
    ses.simulator.set_faults(lost_answers=1, throttled_destinations=10)
    # One call at a time: with two at once, the 10 throttled could be shared by both batches.
    settings = ses.settings.model_copy(update={"send_concurrency": 1, "provider_probe_seconds": 1.0})
    async with running_worker(time_skipping_env.client, settings):
        outcome = await run_send(time_skipping_env.client, settings, seeded.email_id)

    assert (ses.simulator.faults.lost_answers, ses.simulator.faults.throttled_destinations) == (0, 0)
    members = {r["email"] for r in await db.fetch(
        "SELECT m.email FROM members m JOIN members_newsletters mn ON mn.member_id = m.id "
        "WHERE mn.newsletter_id = $1", seeded.newsletter_id)}
    counts = Counter(copy.address for copy in ses.simulator.delivered)
    assert set(counts) == members and set(counts.values()) == {1}
    requeued = await db.fetch("SELECT id, requeued_from, (SELECT count(*) FROM email_recipients r "
                              "WHERE r.batch_id = b.id) AS n FROM email_batches b "
                              "WHERE email_id = $1 AND requeued_from IS NOT NULL", seeded.email_id)
    assert [r["n"] for r in requeued] == [10]
    assert outcome.status == "submitted" and outcome.counts.batches_total == 3
    assert ses.simulator.requests["send"] == 3  # the lost call was confirmed from its Send events, not resent

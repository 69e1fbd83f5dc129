"""The provider's limits end to end: domain warming, a probation account's recipient limit, and a
daily cap, against real PostgreSQL, a real Temporal server and the simulator over HTTP."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from datetime import timedelta

import pytest
from temporalio.worker import Replayer

from activities.sending_limits import batch_sizes, size_after_refusal, warmup_limit
from operations.limits import reset_sending_limit, sending_limits
from worker import running_worker
from workflows.newsletter import SendNewsletterWorkflow
from workflows.newsletter_models import SendNewsletterInput, newsletter_workflow_id

from .conftest import seed_email
from .test_send import delivered, run_send

FALLBACK_DOMAIN = "fallback.test.example"
FALLBACK_ADDRESS = "noreply@fallback.test.example"


def by_domain(mailgun, email_id: str) -> Counter:
    """Recipients accepted per sending domain for this email."""
    return Counter({domain: n for domain, n in Counter(
        m.domain for m in mailgun.messages_for(email_id) for _ in m.recipients).items()})


async def members_of(db, newsletter_id: str) -> set[str]:
    rows = await db.fetch("SELECT m.email FROM members m JOIN members_newsletters mn ON mn.member_id = m.id "
                          "WHERE mn.newsletter_id = $1", newsletter_id)
    return {row["email"] for row in rows}


def test_the_warmup_schedule():
    assert [warmup_limit(day) for day in (0, 1, 20, 41, 42, 400)] == [
        200, round(200 * 1000 ** (1 / 41)), round(200 * 1000 ** (20 / 41)), 200_000, None, None]


def test_the_size_learned_from_a_refusal():
    """The provider's stated limit when it is below the refused size, else half; never zero."""
    assert [size_after_refusal(1000, 300), size_after_refusal(1000, None), size_after_refusal(300, 300),
            size_after_refusal(1, None), size_after_refusal(0, None)] == [300, 500, 299, 1, 1]


async def test_one_batch_size_rule_for_each_kind_of_batch(db, newsletter_settings):
    """The setting, or the smaller size a domain is known to take; a larger learned size changes nothing."""
    settings = newsletter_settings(batch_size=500, fallback_domain=FALLBACK_DOMAIN, fallback_address=FALLBACK_ADDRESS)
    async with db.acquire() as conn:
        assert await batch_sizes(conn, settings) == {False: 500, True: 500}
        await conn.execute("INSERT INTO sending_domain_limits (domain, batch_size, refused_size, reason) "
                           "VALUES ($1, 200, 400, 'test'), ($2, 800, 900, 'test')",
                           FALLBACK_DOMAIN, settings.mailgun_domain)
        assert await batch_sizes(conn, settings) == {False: 500, True: 200}


@pytest.fixture
def warming_settings(newsletter_settings, mailgun):
    mailgun.add_domain(FALLBACK_DOMAIN)
    return newsletter_settings(fallback_domain=FALLBACK_DOMAIN, fallback_address=FALLBACK_ADDRESS)


async def seed_warmed_email(db, days_ago: int) -> None:
    """An earlier email sent with warming `days_ago` days ago: warming's day counts from it."""
    seeded = await seed_email(db, members=0)
    await db.execute("UPDATE emails SET status = 'submitted', csd_email_count = 200 WHERE id = $1", seeded.email_id)
    await db.execute("INSERT INTO email_batches (id, email_id, status, provider_id, created_at) "
                     "VALUES ($1 || '-old', $1, 'submitted', 'old@x', now() - $2 * interval '1 day')",
                     seeded.email_id, days_ago)


async def test_warming_day_0_sends_200_through_the_custom_domain_and_the_rest_through_the_fallback(
        db, mailgun, time_skipping_env, warming_settings):
    seeded = await seed_email(db, members=1000)
    async with running_worker(time_skipping_env.client, warming_settings):
        outcome = await run_send(time_skipping_env.client, warming_settings, seeded.email_id)

    assert outcome.status == "submitted"
    counts = delivered(mailgun, seeded.email_id)
    assert set(counts) == await members_of(db, seeded.newsletter_id) and set(counts.values()) == {1}
    split = by_domain(mailgun, seeded.email_id)
    assert split == {mailgun.domain: 200, FALLBACK_DOMAIN: 800}
    fallback_messages = [m for m in mailgun.messages_for(seeded.email_id) if m.domain == FALLBACK_DOMAIN]
    assert {m.from_address for m in fallback_messages} == {f"Weekly <{FALLBACK_ADDRESS}>"}
    assert {m.headers["Reply-To"] for m in fallback_messages} == {"weekly@example.com"}
    assert all(m.id.endswith("@" + FALLBACK_DOMAIN) for m in fallback_messages)
    assert await db.fetchval("SELECT csd_email_count FROM emails WHERE id = $1", seeded.email_id) == 200
    rows = await db.fetch("SELECT b.fallback_sending_domain AS fallback, count(*) AS n FROM email_recipients r "
                          "JOIN email_batches b ON b.id = r.batch_id WHERE r.email_id = $1 GROUP BY 1",
                          seeded.email_id)
    assert {row["fallback"]: row["n"] for row in rows} == {False: 200, True: 800}
    print(f"\nwarming day 0, 1,000 members: {split[mailgun.domain]} through {mailgun.domain}, "
          f"{split[FALLBACK_DOMAIN]} through {FALLBACK_DOMAIN}; each member {set(counts.values())} time(s)")


async def test_warming_day_42_sends_everyone_through_the_custom_domain(db, mailgun, time_skipping_env,
                                                                        warming_settings):
    await seed_warmed_email(db, days_ago=42)
    seeded = await seed_email(db, members=1000)
    async with running_worker(time_skipping_env.client, warming_settings):
        outcome = await run_send(time_skipping_env.client, warming_settings, seeded.email_id)

    assert outcome.status == "submitted"
    counts = delivered(mailgun, seeded.email_id)
    assert set(counts) == await members_of(db, seeded.newsletter_id) and set(counts.values()) == {1}
    assert by_domain(mailgun, seeded.email_id) == {mailgun.domain: 1000}
    assert await db.fetchval("SELECT csd_email_count FROM emails WHERE id = $1", seeded.email_id) == 1000
    print(f"\nwarming day 42, 1,000 members: {by_domain(mailgun, seeded.email_id)}")


async def test_warming_day_10_follows_the_schedule(db, mailgun, time_skipping_env, warming_settings):
    await seed_warmed_email(db, days_ago=10)
    seeded = await seed_email(db, members=3000)
    async with running_worker(time_skipping_env.client, warming_settings):
        await run_send(time_skipping_env.client, warming_settings, seeded.email_id)
    assert by_domain(mailgun, seeded.email_id) == {mailgun.domain: warmup_limit(10),
                                                   FALLBACK_DOMAIN: 3000 - warmup_limit(10)}


async def test_without_a_fallback_domain_there_is_no_warming(db, mailgun, ts_worker):
    client, settings = ts_worker
    seeded = await seed_email(db, members=500)
    await run_send(client, settings, seeded.email_id)
    assert by_domain(mailgun, seeded.email_id) == {mailgun.domain: 500}
    assert await db.fetchval("SELECT csd_email_count FROM emails WHERE id = $1", seeded.email_id) is None


async def batch_record(db, email_id: str) -> dict[str, Counter]:
    rows = await db.fetch("SELECT b.status, (SELECT count(*) FROM email_recipients r WHERE r.batch_id = b.id) AS n "
                          "FROM email_batches b WHERE b.email_id = $1", email_id)
    record: dict[str, Counter] = {}
    for row in rows:
        record.setdefault(row["status"], Counter())[row["n"]] += 1
    return record


@pytest.mark.parametrize("limit", ["recipient_limit", "large_batch_limit"])
async def test_a_probation_account_receives_the_whole_newsletter_in_smaller_batches(
        db, mailgun, time_skipping_env, newsletter_settings, limit):
    settings = newsletter_settings()
    mailgun.set_limits(**{limit: 10})
    seeded = await seed_email(db, members=1000)
    async with running_worker(time_skipping_env.client, settings):
        outcome = await run_send(time_skipping_env.client, settings, seeded.email_id)

    assert outcome.status == "submitted", outcome.message
    counts = delivered(mailgun, seeded.email_id)
    assert set(counts) == await members_of(db, seeded.newsletter_id) and set(counts.values()) == {1}
    assert all(len(m.recipients) <= 10 for m in mailgun.messages_for(seeded.email_id))
    record = await batch_record(db, seeded.email_id)
    assert set(record) == {"submitted", "retired"}
    assert max(record["submitted"]) <= 10 and sum(n * k for n, k in record["submitted"].items()) == 1000
    assert set(record["retired"]) == {0}  # a retired batch keeps no recipient: each is in exactly one batch
    reasons = await db.fetch("SELECT error_status_code, error_message FROM email_batches "
                             "WHERE email_id = $1 AND status = 'retired' AND error_status_code IS NOT NULL",
                             seeded.email_id)
    assert reasons and {r["error_status_code"] for r in reasons} == {420 if limit == "recipient_limit" else 403}
    assert outcome.counts.recipients_submitted == 1000
    assert outcome.counts.batches_total == sum(record["submitted"].values())

    handle = time_skipping_env.client.get_workflow_handle(newsletter_workflow_id(seeded.email_id))
    history = await handle.fetch_history()
    await Replayer(workflows=[SendNewsletterWorkflow],
                   data_converter=time_skipping_env.client.data_converter).replay_workflow(history)

    learned = {row["domain"]: row for row in await sending_limits(settings)}[mailgun.domain]
    assert learned["batch_size"] == max(record["submitted"]) and learned["refused_size"] > 10 >= learned["batch_size"]
    print(f"\nprobation account ({limit}=10), 1,000 members: {len(counts)} received, each "
          f"{set(counts.values())} time(s); submitted batches by size {dict(record['submitted'])}; "
          f"{sum(record['retired'].values())} refused batches retired; learned batch size "
          f"{learned['batch_size']} for {mailgun.domain}")

    # A later email starts from the size that worked: not one request is refused.
    refused_before = mailgun.stats()["requests"]["messages"] - len(mailgun.messages)
    second = await seed_email(db, members=300)
    async with running_worker(time_skipping_env.client, settings):
        await run_send(time_skipping_env.client, settings, second.email_id)
    assert sum(delivered(mailgun, second.email_id).values()) == 300
    assert mailgun.stats()["requests"]["messages"] - len(mailgun.messages) == refused_before
    assert await batch_record(db, second.email_id) == {"submitted": Counter(
        {learned["batch_size"]: 300 // learned["batch_size"], 300 % learned["batch_size"]: 1})}

    # The operator resets it once the account has left probation.
    await reset_sending_limit(mailgun.domain, settings)
    assert {row["domain"]: row for row in await sending_limits(settings)}[mailgun.domain]["batch_size"] is None


async def test_a_daily_cap_sends_the_rest_after_the_window(db, mailgun, time_skipping_env, newsletter_settings):
    settings = newsletter_settings(daily_send_limit="500")
    seeded = await seed_email(db, members=1200)
    client = time_skipping_env.client
    async with running_worker(client, settings):
        handle = await client.start_workflow(
            SendNewsletterWorkflow.run, SendNewsletterInput(email_id=seeded.email_id),
            id=newsletter_workflow_id(seeded.email_id), task_queue=settings.task_queue)
        # Time stands still until the result is awaited: the email waits at its cap.
        progress = await settled_wait(handle, mailgun, seeded.email_id)
        assert progress.message.startswith(f"waiting for the daily limit of {mailgun.domain} (500 messages), "
                                           "resumes at "), progress.message
        first_day = sum(delivered(mailgun, seeded.email_id).values())
        assert first_day == 500 == progress.recipients_sent
        outcome = await handle.result()

    assert outcome.status == "submitted"
    counts = delivered(mailgun, seeded.email_id)
    assert set(counts) == await members_of(db, seeded.newsletter_id) and set(counts.values()) == {1}
    days = await db.fetch("SELECT date_trunc('day', reserved_at) AS day, sum(recipients) AS n "
                          "FROM sending_quota_reservations GROUP BY 1 ORDER BY 1")
    # At 500 a day the other 700 take two more windows.
    assert [row["n"] for row in days] == [500, 500, 200]
    assert [b["day"] - a["day"] for a, b in itertools.pairwise(days)] == [timedelta(days=1)] * 2
    history = await handle.fetch_history()
    assert any(e.HasField("timer_started_event_attributes") for e in history.events)
    await Replayer(workflows=[SendNewsletterWorkflow], data_converter=client.data_converter).replay_workflow(history)
    print(f"\ndaily cap 500, 1,200 members: {first_day} the first day, then "
          + ", ".join(f"{row['n']} on {row['day']:%Y-%m-%d}" for row in days)
          + f"; {len(counts)} members each {set(counts.values())} time(s); progress said: {progress.message!r}")


async def settled_wait(handle, mailgun, email_id: str):
    """The progress once the email waits (or is done) and its count has not moved for a second."""
    last, still = -1, 0
    for _ in range(1200):
        progress = await handle.query(SendNewsletterWorkflow.progress)
        total = sum(delivered(mailgun, email_id).values())
        still = still + 1 if (total, progress.recipients_sent) == last else 0
        last = (total, progress.recipients_sent)
        if (progress.status == "submitted" or progress.message.startswith("waiting for")) and still >= 10:
            return progress
        await asyncio.sleep(0.1)
    raise AssertionError(f"the email neither waits nor ends: {progress}")


async def test_an_hourly_cap_shared_by_two_emails(db, mailgun, time_skipping_env, newsletter_settings):
    settings = newsletter_settings(hourly_send_limit="300")
    first, second = await seed_email(db, members=250), await seed_email(db, members=250)
    client = time_skipping_env.client
    async with running_worker(client, settings):
        handles = [await client.start_workflow(
            SendNewsletterWorkflow.run, SendNewsletterInput(email_id=s.email_id),
            id=newsletter_workflow_id(s.email_id), task_queue=settings.task_queue) for s in (first, second)]
        # Both run together; their results are awaited one after the other. Two result waits at
        # once, each unlocking and relocking the test server's time skipping, were seen to leave
        # it locked while the second email waited on its hour-long timer in real time, for ever.
        outcomes = [await handle.result() for handle in handles]
    assert [o.status for o in outcomes] == ["submitted", "submitted"]
    hours = await db.fetch("SELECT date_trunc('hour', reserved_at) AS hour, sum(recipients) AS n "
                           "FROM sending_quota_reservations GROUP BY 1 ORDER BY 1")
    assert max(row["n"] for row in hours) <= 300 and sum(row["n"] for row in hours) == 500 and len(hours) == 2
    for seeded in (first, second):
        assert set(delivered(mailgun, seeded.email_id).values()) == {1}


async def test_mailguns_own_daily_cap_is_waited_out_on_a_timer(db, mailgun, time_skipping_env, newsletter_settings):
    """Without a cap configured, Mailgun's 420 "try again after <tomorrow>" is waited for on a timer."""
    settings = newsletter_settings(batch_size=100)
    mailgun.set_limits(daily_limit=500)
    seeded = await seed_email(db, members=1200)
    env, client = time_skipping_env, time_skipping_env.client
    per_day: list[int] = []
    async with running_worker(client, settings):
        handle = await client.start_workflow(
            SendNewsletterWorkflow.run, SendNewsletterInput(email_id=seeded.email_id),
            id=newsletter_workflow_id(seeded.email_id), task_queue=settings.task_queue)
        for _ in range(5):
            progress = await settled_wait(handle, mailgun, seeded.email_id)
            per_day.append(sum(delivered(mailgun, seeded.email_id).values()) - sum(per_day))
            if progress.status == "submitted":
                break
            assert progress.message.startswith("waiting for Mailgun's sending limit, resumes at "), progress.message
            # The simulator's next day, and time for the workflow's timers to fire.
            mailgun.advance(86400 - mailgun.now() % 86400)
            await env.sleep(timedelta(days=3))
        outcome = await handle.result()
    assert outcome.status == "submitted" and outcome.counts.batches_failed == 0
    assert per_day == [500, 500, 200]
    counts = delivered(mailgun, seeded.email_id)
    assert len(counts) == 1200 and set(counts.values()) == {1}

"""Domain warming: events are read from the custom and the fallback domain, each with its own cursor."""

from __future__ import annotations

from tests.conftest import make_settings

from .conftest import actual_counts, expected_counts, seed_newsletter, send_all, sim_now, simulator_truth
from .test_fetch import run_fetch

FALLBACK = "fallback.analytics.example"


async def test_events_of_both_domains_are_applied(dev_env, db, mailgun, client, postgres_url):
    mailgun.add_domain(FALLBACK)
    settings = make_settings(postgres_url, mailgun, analytics_end_margin_seconds=0,
                             analytics_trust_threshold_seconds=300, fallback_domain=FALLBACK,
                             fallback_address=f"noreply@{FALLBACK}")
    custom, warmed = await seed_newsletter(db, members=600, emails=2)
    await send_all(client, db, [custom])
    await send_all(client.for_scope(FALLBACK), db, [warmed])
    await db.execute("UPDATE email_batches SET fallback_sending_domain = true WHERE email_id = $1", warmed)
    mailgun.advance(60)

    result = await run_fetch(dev_env, settings, sim_now(mailgun))
    truth = {**await simulator_truth(client), **await simulator_truth(client.for_scope(FALLBACK))}
    expected, _ = await expected_counts(db, truth)
    emails, _ = await actual_counts(db)
    assert emails == expected and emails[warmed][0] > 500 and emails[custom][0] > 500
    assert result.by_type()["delivered"] == mailgun.stats()["events_by_kind"]["delivered"]
    cursors = {r["name"] for r in await db.fetch("SELECT name FROM jobs WHERE name LIKE $1", f"{FALLBACK}:%")}
    assert cursors == {f"{FALLBACK}:email-analytics-latest-opened", f"{FALLBACK}:email-analytics-latest",
                       f"{FALLBACK}:email-analytics-missing"}

    # Without warming configured, only the custom domain is read.
    await db.execute("UPDATE email_recipients SET delivered_at = NULL, opened_at = NULL, failed_at = NULL")
    await db.execute("DELETE FROM jobs")
    plain = make_settings(postgres_url, mailgun, analytics_end_margin_seconds=0,
                          analytics_trust_threshold_seconds=300)
    await run_fetch(dev_env, plain, sim_now(mailgun))
    assert await db.fetchval("SELECT count(delivered_at) FROM email_recipients WHERE email_id = $1", warmed) == 0

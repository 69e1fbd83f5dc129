"""The sending setup and the reputation, as `check` reads them and as a send meets them: an
identity the provider has not verified is refused by name before the first batch, a domain without
DMARC is warned about, and the last 30 days' rates are warned about and failed at their thresholds.
Real PostgreSQL, the Mailgun simulator and the SES stand-in over HTTP, a DNS server of the test's."""

from __future__ import annotations

import pytest

from operations.deliverability import check_reputation, check_senders, dmarc_record, site_reputation
from tests.dns_server import dns_server
from tests.newsletter.conftest import seed_email


async def test_check_warns_of_a_missing_dmarc_record_and_reads_its_policy_when_there(settings, db, mailgun):
    async with dns_server({"_dmarc.example.com": "v=DMARC1; p=reject; rua=mailto:d@example.com"}) as server:
        published = settings.model_copy(update={"dns_nameservers": server})
        result = await check_senders(None, published)
        assert result.ok and not result.warning and "DMARC example.com p=reject" in result.detail
        await db.execute("INSERT INTO newsletters (name, slug, sender_email) "
                         "VALUES ('Other', 'other', 'news@nodmarc.example')")
        result = await check_senders(None, published)
        assert result.ok and result.warning and "no DMARC record at _dmarc.nodmarc.example" in result.detail
    record = await dmarc_record("example.com", settings.model_copy(update={
        "dns_nameservers": "127.0.0.1:9", "dns_timeout_seconds": 0.5}))
    assert record.found is None and "DNS did not answer" in record.detail  # nobody listens: said, not raised
    mailgun.unverified_domains.add(mailgun.domain)
    result = await check_senders(None, settings)
    assert not result.ok and f"{mailgun.domain} not verified by Mailgun" in result.detail


async def record_outcomes(db, *, sent: int, delivered: int, hard_bounced: int, complained: int) -> None:
    """An email submitted today with `sent` recipients, of whom the first are delivered, hard-bounced
    and complained as asked."""
    seeded = await seed_email(db, members=sent)
    email_id = seeded.email_id
    await db.execute("UPDATE emails SET status = 'submitted', submitted_at = now() WHERE id = $1", email_id)
    await db.execute("INSERT INTO email_batches (id, email_id, status, provider_id) "
                     "VALUES ($1 || '-b', $1, 'submitted', 'x@mg')", email_id)
    await db.execute(
        "INSERT INTO email_recipients (email_id, member_id, batch_id, member_uuid, member_email, delivered_at) "
        "SELECT $1, m.id, $1 || '-b', m.uuid, m.email, CASE WHEN row_number() OVER (ORDER BY m.id) <= $2 "
        "THEN now() END FROM members m JOIN members_newsletters mn ON mn.member_id = m.id "
        "WHERE mn.newsletter_id = $3", email_id, delivered, seeded.newsletter_id)
    await db.execute(
        "INSERT INTO email_recipient_failures (email_id, member_id, email_recipient_id, code, message, severity, "
        "failed_at, event_id) SELECT $1, member_id, id, 550, 'gone', 'permanent', now(), 'f-' || id "
        "FROM email_recipients WHERE email_id = $1 ORDER BY id DESC LIMIT $2", email_id, hard_bounced)
    await db.execute(
        "INSERT INTO email_spam_complaint_events (member_id, email_id, email_address) "
        "SELECT member_id, $1, member_email FROM email_recipients WHERE email_id = $1 ORDER BY id LIMIT $2",
        email_id, complained)


@pytest.mark.parametrize("hard_bounced, complained, verdict", [
    (10, 0, "ok"),  # 1% hard bounces, no complaints
    (30, 0, "warn"),  # 3% hard bounces: over 2%
    (10, 2, "warn"),  # 0.2% complaints: over 0.1%
    (10, 4, "fail"),  # 0.4% complaints: over 0.3%
    (60, 0, "fail"),  # 6% hard bounces: over 5%
])
async def test_the_last_30_days_rates_are_warned_about_and_failed_at_their_thresholds(
        settings, db, hard_bounced, complained, verdict):
    await record_outcomes(db, sent=1000, delivered=1000 - hard_bounced, hard_bounced=hard_bounced,
                          complained=complained)
    reputation = await site_reputation(settings)
    assert (reputation.sent, reputation.hard_bounced, reputation.complained) == (1000, hard_bounced, complained)
    assert reputation.hard_bounce_rate == pytest.approx(hard_bounced / 1000)
    assert reputation.complaint_rate == pytest.approx(complained / (1000 - hard_bounced))
    result = await check_reputation(None, settings)
    assert ("fail" if not result.ok else "warn" if result.warning else "ok") == verdict, result.detail
    assert result.detail.startswith("last 30 days: complaints ")

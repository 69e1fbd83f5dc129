"""Analytics fixtures: a newsletter seeded in the database, sends through the simulator, a worker."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

import asyncpg
import pytest

from activities.analytics.run import AnalyticsActivities
from devstack.mailgun_simulator import MailgunSimulator
from pressroom.dependencies import Dependencies
from pressroom.providers.mailgun import MailgunClient
from pressroom.settings import Settings
from tests.conftest import make_settings

FROM = "Pressroom <news@mg.test.example>"


def address(n: int) -> str:
    return f"member{n}@example.com"


async def seed_newsletter(db: asyncpg.Pool, *, members: int, emails: int, track_opens: bool = True,
                          first_email: int = 0) -> list[str]:
    """`members` members subscribed to newsletter nl1 and `emails` emails sent to all of them."""
    await db.execute("INSERT INTO newsletters (id, name, slug) VALUES ('nl1', 'Weekly', 'weekly') "
                     "ON CONFLICT DO NOTHING")
    await db.execute("INSERT INTO members (id, email) SELECT 'm' || n, 'member' || n || '@example.com' "
                     "FROM generate_series(0, $1 - 1) n ON CONFLICT DO NOTHING", members)
    await db.execute("INSERT INTO members_newsletters (member_id, newsletter_id) SELECT id, 'nl1' FROM members "
                     "ON CONFLICT DO NOTHING")
    ids = []
    for number in range(first_email, first_email + emails):
        email_id = f"e{number}"
        ids.append(email_id)
        await db.execute("INSERT INTO posts (id, title, slug) VALUES ($1, $1, $1)", f"p{number}")
        await db.execute("INSERT INTO emails (id, post_id, newsletter_id, subject, status, track_opens) "
                         "VALUES ($1, $2, 'nl1', 'Issue', 'submitted', $3)", email_id, f"p{number}", track_opens)
        await db.execute("INSERT INTO email_batches (id, email_id) SELECT $1 || '-b' || k, $1 "
                         "FROM generate_series(0, ($2 - 1) / 1000) k", email_id, members)
        await db.execute(
            "INSERT INTO email_recipients (email_id, member_id, batch_id, member_uuid, member_email) "
            "SELECT $1, m.id, $1 || '-b' || (substr(m.id, 2)::int / 1000), m.uuid, m.email FROM members m "
            "WHERE substr(m.id, 2)::int < $2", email_id, members)
    return ids


async def send_all(mailgun: MailgunClient, db: asyncpg.Pool, email_ids: list[str]) -> None:
    """Send every seeded recipient through the simulator, 1,000 a message, with v:email-id."""
    for email_id in email_ids:
        rows = await db.fetch("SELECT batch_id, member_email FROM email_recipients WHERE email_id = $1 "
                              "ORDER BY batch_id", email_id)
        batches: dict[str, list[str]] = defaultdict(list)
        for row in rows:
            batches[row["batch_id"]].append(row["member_email"])
        for batch_id, to in batches.items():
            provider_id = await mailgun.send_batch(
                from_address=FROM, to=to, subject="Issue", html="<p>Hi</p>", text="Hi",
                recipient_variables={a: {} for a in to}, variables={"email-id": email_id})
            await db.execute("UPDATE email_batches SET status = 'submitted', provider_id = $2 WHERE id = $1",
                             batch_id, provider_id)


async def simulator_truth(mailgun: MailgunClient) -> dict[tuple[str, str], dict[str, bool]]:
    """From the simulator's event log: per (email id, address), delivered / opened / failed (permanent)."""
    truth: dict[tuple[str, str], dict[str, bool]] = defaultdict(dict)
    begin = datetime.now(UTC) - timedelta(days=2)
    async for page in mailgun.events(begin=begin, end=datetime.now(UTC) + timedelta(days=2)):
        for item in page:
            key = (item["user-variables"]["email-id"], item["recipient"])
            kind = item["event"]
            if kind == "failed" and item["severity"] != "permanent":
                continue
            truth[key][kind] = True
    return truth


async def expected_counts(db: asyncpg.Pool, truth) -> tuple[dict, dict]:
    """(email id → (delivered, opened, failed)), (member id → (received, opened, open rate))."""
    emails: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    members: dict[str, list] = {}
    rows = await db.fetch("SELECT er.email_id, er.member_id, er.member_email, e.track_opens "
                          "FROM email_recipients er JOIN emails e ON e.id = er.email_id")
    tracked: dict[str, int] = defaultdict(int)
    for row in rows:
        seen = truth.get((row["email_id"], row["member_email"]), {})
        counts = emails[row["email_id"]]
        counts[0] += bool(seen.get("delivered"))
        counts[1] += bool(seen.get("opened"))
        counts[2] += bool(seen.get("failed"))
        member = members.setdefault(row["member_id"], [0, 0])
        member[0] += 1
        member[1] += bool(seen.get("opened"))
        tracked[row["member_id"]] += bool(row["track_opens"])
    member_result = {}
    for member_id, (received, opened) in members.items():
        n = tracked[member_id]
        # A whole percentage rounded half up, as PostgreSQL's round() does.
        rate = min(100, int((Decimal(100 * opened) / Decimal(n)).quantize(Decimal(1), ROUND_HALF_UP))) \
            if n >= 5 else None
        member_result[member_id] = (received, opened, rate)
    return {k: tuple(v) for k, v in emails.items()}, member_result


async def actual_counts(db: asyncpg.Pool) -> tuple[dict, dict]:
    emails = {r["id"]: (r["delivered_count"], r["opened_count"], r["failed_count"])
              for r in await db.fetch("SELECT id, delivered_count, opened_count, failed_count FROM emails")}
    members = {r["id"]: (r["email_count"], r["email_opened_count"], r["email_open_rate"])
               for r in await db.fetch("SELECT id, email_count, email_opened_count, email_open_rate FROM members "
                                       "WHERE id IN (SELECT member_id FROM email_recipients)")}
    return emails, members


async def snapshot(db: asyncpg.Pool) -> tuple:
    """Everything analytics writes, to compare before and after a run."""
    queries = (
        "SELECT id, delivered_at, opened_at, failed_at FROM email_recipients ORDER BY id",
        "SELECT id, delivered_count, opened_count, failed_count FROM emails ORDER BY id",
        "SELECT id, email_count, email_opened_count, email_open_rate FROM members ORDER BY id",
        "SELECT event_id, severity FROM email_recipient_failures ORDER BY event_id",
        "SELECT email_id, member_id FROM email_spam_complaint_events ORDER BY 1, 2",
        "SELECT email, reason FROM suppressions ORDER BY 1",
        "SELECT member_id, newsletter_id FROM members_newsletters ORDER BY 1, 2")
    return tuple([[tuple(r) for r in await db.fetch(query)] for query in queries])


@pytest.fixture
def analytics_settings(postgres_url: str, mailgun: MailgunSimulator, db: asyncpg.Pool) -> Settings:
    # No end margin and a 5-minute trust threshold: tests pin the run's clock to the simulator's.
    return make_settings(postgres_url, mailgun, analytics_end_margin_seconds=0,
                         analytics_trust_threshold_seconds=300)


@pytest.fixture
async def client(mailgun: MailgunSimulator) -> AsyncIterator[MailgunClient]:
    async with MailgunClient(base_url=mailgun.base_url, api_key=mailgun.api_key, domain=mailgun.domain,
                             timeout=10.0) as client:
        yield client


def activities_for(settings: Settings, db: asyncpg.Pool, mailgun: MailgunClient) -> AnalyticsActivities:
    return AnalyticsActivities(Dependencies(settings=settings, pool=db, provider=mailgun, temporal=None))


def sim_now(mailgun: MailgunSimulator) -> datetime:
    return datetime.fromtimestamp(mailgun.now(), tz=UTC)

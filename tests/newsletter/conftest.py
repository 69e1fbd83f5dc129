"""Seeding a site for newsletter tests, and running a send against a real worker."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg
import pytest

from worker import running_worker


@dataclass(frozen=True)
class SeededEmail:
    email_id: str
    post_id: str
    newsletter_id: str


async def seed_email(pool: asyncpg.Pool, *, members: int, paid_every: int = 0, recipient_filter: str = "all",
                     html: str = "<p>Hello %recipient.name%</p>", post_status: str = "published") -> SeededEmail:
    """A newsletter with `members` subscribers (every `paid_every`-th paid), a post and its pending email.

    The post is published (only a published post's email is sent); a test that schedules it asks for a draft.
    """
    tag = uuid.uuid4().hex[:8]
    async with pool.acquire() as conn, conn.transaction():
        newsletter_id = await conn.fetchval(
            "INSERT INTO newsletters (name, slug, sender_email) VALUES ('Weekly', $1, 'weekly@example.com') "
            "RETURNING id", f"weekly-{tag}")
        await conn.execute(
            """INSERT INTO members (email, name, status, created_at)
               SELECT 'm' || n || '-' || $1 || '@example.com',
                      'Member ' || n, CASE WHEN $3 > 0 AND n % $3 = 0 THEN 'paid' ELSE 'free' END,
                      now() - interval '1 hour'
               FROM generate_series(1, $2) n""", tag, members, paid_every)
        await conn.execute(
            "INSERT INTO members_newsletters (member_id, newsletter_id) "
            "SELECT id, $1 FROM members WHERE email LIKE '%' || $2 || '%'", newsletter_id, tag)
        post_id = await conn.fetchval(
            "INSERT INTO posts (title, slug, html, newsletter_id, status, published_at) "
            "VALUES ('Issue', $1, $2, $3, $4, CASE WHEN $4 = 'published' THEN now() END) RETURNING id",
            f"issue-{tag}", html, newsletter_id, post_status)
        email_id = await conn.fetchval(
            "INSERT INTO emails (post_id, newsletter_id, subject, html, plaintext, recipient_filter) "
            "VALUES ($1, $2, 'Issue 1', $3, 'Hello', $4) RETURNING id", post_id, newsletter_id, html, recipient_filter)
    return SeededEmail(email_id, post_id, newsletter_id)


async def refused_by_mailgun(pool: asyncpg.Pool, settings, email_id: str, count: int = 1) -> list[str]:
    """Write the email's batches, then give `count` recipients an address Mailgun refuses, as if it
    changed after they were written (creation leaves out every address it can tell is unusable, so
    a refusal can only come from one that changed meanwhile). Returns the addresses replaced."""
    from temporalio.testing import ActivityEnvironment

    from activities.newsletter.batches import BatchCreationActivities
    from activities.newsletter.models import CreateBatchesInput
    from pressroom.dependencies import Dependencies

    activities = BatchCreationActivities(Dependencies(settings=settings, pool=pool, provider=None, temporal=None))
    await ActivityEnvironment().run(activities.create_batches, CreateBatchesInput(email_id=email_id,
                                                                                  retry_failed=False))
    rows = await pool.fetch(
        "UPDATE email_recipients r SET member_email = 'broken' || n || '@invalid' FROM ("
        "  SELECT id, row_number() OVER (ORDER BY id) AS n FROM email_recipients WHERE email_id = $1 "
        "  ORDER BY id LIMIT $2) o WHERE r.id = o.id RETURNING r.member_email", email_id, count)
    return [row["member_email"] for row in rows]


@pytest.fixture
async def ts_worker(time_skipping_env, newsletter_settings):
    """A worker on the time-skipping server; retries and timers take no time."""
    settings = newsletter_settings()
    async with running_worker(time_skipping_env.client, settings):
        yield time_skipping_env.client, settings

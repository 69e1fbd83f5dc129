"""The demo's site: a newsletter, its members, the welcome emails and one post with its email.

Seeding is set-based (one INSERT … SELECT from generate_series for the members) and safe to run
again on the same database: the newsletter, the members and the welcome emails are reused, and
each run adds one new post, so every demo has a fresh newsletter to send.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import asyncpg

from operations.authoring import post_lexical, post_text
from pressroom.errors import PressroomError

DEMO_NEWSLETTER_SLUG = "pressroom-weekly"
DEMO_MEMBER_ADDRESS = "reader{n}@demo.pressroom.test"


def _text(words: str, url: str | None = None) -> dict:
    node = {"type": "text", "text": words, "format": 0, "detail": 0, "mode": "normal", "style": "", "version": 1}
    return node if url is None else {"type": "link", "url": url, "children": [node], "version": 1}


_DEMO_POST = json.dumps({"root": {"type": "root", "version": 1, "children": [
    {"type": "paragraph", "version": 1, "children": [_text(
        "Everything Pressroom does, in one minute: a post published on time, a newsletter sent to every "
        "member exactly once, and the statistics fetched back.")]},
    {"type": "callout", "version": 1, "calloutEmoji": "📬", "backgroundColor": "blue",
     "calloutText": "<p>This email is the newsletter's design around the post: its title, excerpt and byline, "
                    "the body card by card, and a footer with your own links.</p>"},
    {"type": "paragraph", "version": 1, "children": [
        _text("Read on: "), _text("Temporal", "https://temporal.io/"), _text(", "),
        _text("newsletters on the reference platform", "https://ghost.org/docs/newsletters/"), _text(".")]},
    {"type": "button", "version": 1, "buttonText": "How the design is made", "alignment": "center",
     "buttonUrl": "https://ghost.org/docs/newsletters/"},
]}})


@dataclass(frozen=True)
class DemoSite:
    newsletter_id: str
    post_id: str
    email_id: str
    members: int


async def seed_site(pool: asyncpg.Pool, *, members: int, run_tag: str) -> DemoSite:
    """Newsletter, `members` subscribed members (a tenth of them paid, in tiers; some labelled),
    welcome emails, a new post."""
    async with pool.acquire() as conn, conn.transaction():
        newsletter_id = await conn.fetchval(
            """INSERT INTO newsletters (name, slug, sender_name, sender_email, sender_reply_to)
               VALUES ('Pressroom Weekly', $1, 'Pressroom Weekly', 'weekly@demo.pressroom.test', 'newsletter')
               ON CONFLICT (slug) DO UPDATE SET updated_at = now()
               RETURNING id""", DEMO_NEWSLETTER_SLUG)
        # Members created a minute in the past, so they are older than the email made below.
        await conn.execute(
            """INSERT INTO members (email, name, status, created_at)
               SELECT replace($1, '{n}', n::text), 'Reader ' || n,
                      CASE WHEN n % 10 = 0 THEN 'paid' ELSE 'free' END, now() - interval '1 minute'
               FROM generate_series(1, $2) AS n
               ON CONFLICT (email) DO NOTHING""", DEMO_MEMBER_ADDRESS, members)
        # Subscribed unless they ever chose otherwise: a reader who left (by their link, the
        # provider's unsubscribe, the operator) stays out of every later demo, their leave recorded.
        await conn.execute(
            """INSERT INTO members_newsletters (member_id, newsletter_id)
               SELECT m.id, $1 FROM members m
               WHERE m.email LIKE 'reader%@demo.pressroom.test'
                 AND NOT EXISTS (SELECT 1 FROM members_subscribe_events e
                                 WHERE e.member_id = m.id AND e.newsletter_id = $1)
               ON CONFLICT (member_id, newsletter_id) DO NOTHING""", newsletter_id)
        # A few labels and tiers, as a site has them: a filter such as `label:press` or `tier:patron`
        # has someone to find. Readers whose number ends as below; the paid ones are supporters,
        # every other one a patron too.
        await conn.execute(
            """INSERT INTO labels (name, slug) VALUES ('Press', 'press'), ('Beta readers', 'beta')
               ON CONFLICT (slug) DO NOTHING""")
        await conn.execute(
            """INSERT INTO products (name, slug, type) VALUES ('Supporter', 'supporter', 'paid'),
                      ('Patron', 'patron', 'paid') ON CONFLICT (slug) DO NOTHING""")
        await conn.execute(
            """INSERT INTO members_labels (member_id, label_id)
               SELECT m.id, l.id FROM generate_series(1, $2) AS n
               JOIN members m ON m.email = replace($1, '{n}', n::text)
               JOIN labels l ON l.slug = CASE WHEN n % 25 = 0 THEN 'press' WHEN n % 7 = 0 THEN 'beta' END
               ON CONFLICT (member_id, label_id) DO NOTHING""", DEMO_MEMBER_ADDRESS, members)
        await conn.execute(
            """INSERT INTO members_products (member_id, product_id)
               SELECT m.id, p.id FROM generate_series(1, $2) AS n
               JOIN members m ON m.email = replace($1, '{n}', n::text) AND m.status = 'paid'
               JOIN products p ON p.slug = 'supporter' OR (p.slug = 'patron' AND n % 20 = 0)
               ON CONFLICT (member_id, product_id) DO NOTHING""", DEMO_MEMBER_ADDRESS, members)
        await conn.execute(
            """INSERT INTO automated_emails (name, slug, subject, html, plaintext)
               VALUES ('Welcome (free)', 'member-welcome-email-free', 'Welcome to Pressroom Weekly',
                       '<p>Welcome, %recipient.name%!</p>', 'Welcome, %recipient.name%!'),
                      ('Welcome (paid)', 'member-welcome-email-paid', 'Thank you for subscribing',
                       '<p>Thank you, %recipient.name%!</p>', 'Thank you, %recipient.name%!')
               ON CONFLICT (slug) DO NOTHING""")
        title = f"The demo issue {run_tag}"
        # Written as the reference's editor writes a post (Lexical, with cards), its email rendered
        # per card and sent in the newsletter's design, with its excerpt and byline.
        content = post_lexical(_DEMO_POST)
        post_id = await conn.fetchval(
            """INSERT INTO posts (title, slug, html, plaintext, lexical, email_html, custom_excerpt, newsletter_id)
               VALUES ($1, $2, $3, $4, $5, $6, 'Everything Pressroom does, in one minute', $7) RETURNING id""",
            title, f"demo-issue-{run_tag}", content["html"], post_text(content["email_html"]), content["lexical"],
            content["email_html"], newsletter_id)
        author = await conn.fetchval(
            """INSERT INTO authors (name, slug) VALUES ('The Pressroom desk', 'pressroom-desk')
               ON CONFLICT (slug) DO UPDATE SET name = EXCLUDED.name RETURNING id""")
        await conn.execute("INSERT INTO posts_authors (post_id, author_id) VALUES ($1, $2)", post_id, author)
        email_id = await conn.fetchval(  # no snapshot of its own: the email is the post's email rendering
            """INSERT INTO emails (post_id, newsletter_id, subject, recipient_filter)
               VALUES ($1, $2, $3, 'all') RETURNING id""", post_id, newsletter_id, title)
        subscribed = await conn.fetchval(
            "SELECT count(*) FROM members_newsletters WHERE newsletter_id = $1", newsletter_id)
    return DemoSite(newsletter_id=newsletter_id, post_id=post_id, email_id=email_id, members=subscribed)


async def wait_for_welcome_email(pool: asyncpg.Pool, idempotency_key: str, seconds: float = 60) -> None:
    await _wait_for(pool, "SELECT status = 'succeeded' FROM outbox WHERE idempotency_key = $1", idempotency_key,
                    what="the welcome email", seconds=seconds)


async def wait_for_publication(pool: asyncpg.Pool, post_id: str, seconds: float) -> float:
    """Waits for the post to be published; returns how late it went out, in milliseconds."""
    await _wait_for(pool, "SELECT status = 'published' FROM posts WHERE id = $1", post_id, what="the post",
                    seconds=seconds)
    return float(await pool.fetchval("SELECT extract(epoch FROM publish_completed_at - published_at) * 1000 "
                                     "FROM posts WHERE id = $1", post_id))


async def _wait_for(pool: asyncpg.Pool, query: str, *args, what: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not await pool.fetchval(query, *args):
        if time.monotonic() > deadline:
            raise PressroomError(f"the demo waited {seconds:.0f} s for {what}; check the worker's log")
        await asyncio.sleep(0.1)

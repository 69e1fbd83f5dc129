"""Benchmark: batch creation for a filtered audience (not a test). Times the batch creation of an
email to N members (100,000 by default) with a three-term filter over labels and tiers against the
plain `status:-free` send, in the same run, written in one statement and in chunks; then grows the
site to --plan-members (a million by default) and prints the filter's query plans there.

Starts its own PostgreSQL, seeds it set-based (members a tenth paid and a twentieth comped; labels
vip 5%, press 1%, beta 10%; tiers gold and silver, a tenth of the gold ones ended), and runs the
real activity (BatchCreationActivities.create_batches) through Temporal's ActivityEnvironment: the
same SQL a worker runs. Each creation is timed --repeat times; its rows are deleted in between.

    .venv/bin/python bench/audiences.py --members 100000 --plan-members 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.testing import ActivityEnvironment

from activities.newsletter.audience import AUDIENCE_BY_SEGMENT, RECIPIENTS, audience
from activities.newsletter.batches import BatchCreationActivities
from activities.newsletter.models import CreateBatchesInput
from devstack.servers import Postgres, free_port
from pressroom import database
from pressroom.dependencies import Dependencies
from pressroom.inputs import PLAIN_ADDRESS, PLAIN_DOMAIN_LENGTH, SPECIAL_USE_DOMAINS
from pressroom.settings import load_settings

FILTER = "(label:vip,label:press)+tier:-silver"  # three terms: two labels, a tier
PLAIN = "status:-free"

SETUP = """
INSERT INTO newsletters (id, name, slug) VALUES ('n1', 'Weekly', 'weekly');
INSERT INTO labels (id, name, slug) VALUES ('l-vip', 'VIP', 'vip'), ('l-press', 'Press', 'press'),
                                           ('l-beta', 'Beta', 'beta');
INSERT INTO products (id, name, slug) VALUES ('t-gold', 'Gold', 'gold'), ('t-silver', 'Silver', 'silver');
"""
MEMBERS = [
    ("members", """INSERT INTO members (id, email, name, status, created_at)
                   SELECT 'm' || lpad(n::text, 8, '0'), 'reader' || n || '@bench.example', 'Reader ' || n,
                          CASE WHEN n % 10 = 0 THEN 'paid' WHEN n % 20 = 1 THEN 'comped' ELSE 'free' END,
                          now() - interval '2 days'
                   FROM generate_series($1::int, $2::int) n"""),
    ("subscriptions", """INSERT INTO members_newsletters (member_id, newsletter_id)
                         SELECT 'm' || lpad(n::text, 8, '0'), 'n1' FROM generate_series($1::int, $2::int) n"""),
    ("labels", """INSERT INTO members_labels (member_id, label_id)
                  SELECT 'm' || lpad(n::text, 8, '0'), l FROM generate_series($1::int, $2::int) n,
                         LATERAL (VALUES (CASE WHEN n % 20 = 3 THEN 'l-vip' END),
                                         (CASE WHEN n % 100 = 7 THEN 'l-press' END),
                                         (CASE WHEN n % 10 = 5 THEN 'l-beta' END)) v (l)
                  WHERE l IS NOT NULL"""),
    ("tiers", """INSERT INTO members_products (member_id, product_id, expiry_at)
                 SELECT 'm' || lpad(n::text, 8, '0'), CASE WHEN n % 40 IN (0, 3) THEN 't-gold' ELSE 't-silver' END,
                        CASE WHEN n % 400 = 0 THEN now() - interval '1 day' END
                 FROM generate_series($1::int, $2::int) n WHERE n % 40 IN (0, 3) OR n % 20 = 1"""),
]


async def seed(pool, first: int, last: int) -> None:
    async with pool.acquire() as conn:
        for name, statement in MEMBERS:
            began = time.perf_counter()
            await conn.execute(statement, first, last)
            print(f"  seeded {name:<14} {time.perf_counter() - began:7.1f} s", flush=True)
        began = time.perf_counter()
        await conn.execute("VACUUM ANALYZE")
        print(f"  vacuum analyze        {time.perf_counter() - began:7.1f} s", flush=True)


async def make_email(pool, email_id: str, recipient_filter: str) -> None:
    await pool.execute(
        """WITH p AS (INSERT INTO posts (id, title, slug, html, status, newsletter_id)
                      VALUES ($1, $1, $1, '<p>Hello</p>', 'published', 'n1') RETURNING id)
           INSERT INTO emails (id, post_id, newsletter_id, subject, html, recipient_filter)
           SELECT $1, id, 'n1', 'Issue', '<p>Hello</p>', $2 FROM p""", email_id, recipient_filter)


async def forget(pool, email_id: str) -> None:
    for table in ("email_recipients", "email_batches", "email_batch_creation", "email_skipped_recipients"):
        await pool.execute(f"DELETE FROM {table} WHERE email_id = $1", email_id)


async def create(activities, email_id: str, chunked: bool) -> int:
    counts = None
    while counts is None or counts.creating:
        counts = await ActivityEnvironment().run(
            activities.create_batches, CreateBatchesInput(email_id=email_id, retry_failed=False, chunked=chunked))
    return counts.recipients_total


async def timed(pool, activities, email_id: str, chunked: bool, repeat: int) -> tuple[float, float, int]:
    seconds, recipients = [], 0
    for _ in range(repeat):
        await forget(pool, email_id)
        began = time.perf_counter()
        recipients = await create(activities, email_id, chunked)
        seconds.append(time.perf_counter() - began)
    return min(seconds), statistics.median(seconds), recipients


async def plans(pool, members: int) -> None:
    """EXPLAIN ANALYZE of the filter's pass over the whole audience (the plan's count per segment,
    which also finds unusable addresses) and of one chunk's selection, in a transaction rolled back."""
    email = await pool.fetchrow("SELECT newsletter_id, post_id, recipient_filter, created_at FROM emails "
                                "WHERE id = 'e-filter'")
    chosen = audience(email, as_of=datetime.now(UTC), tiers=False)
    async with pool.acquire() as conn:
        whole = await conn.fetch("EXPLAIN (ANALYZE, COSTS OFF) " + chosen.sql(AUDIENCE_BY_SEGMENT), *chosen.params,
                                 PLAIN_ADDRESS, list(SPECIAL_USE_DOMAINS), PLAIN_DOMAIN_LENGTH)
        print("plan: the audience counted by segment (one pass, as a creation plans):")
        print("\n".join("    " + r[0] for r in whole))
        chunk = await conn.fetch("EXPLAIN (ANALYZE, COSTS OFF) " + chosen.sql(
            f"SELECT m.id {RECIPIENTS} AND m.id > $4::text AND mn.member_id > $4::text ORDER BY m.id LIMIT 10000"),
            *chosen.params, f"m{members // 2:08d}")
        print("plan: one chunk of 10,000 recipients from the middle of the member ids:")
        print("\n".join("    " + r[0] for r in chunk))


async def main(members: int, plan_members: int, repeat: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="pressroom-bench-audiences-"))
    postgres = Postgres(folder / "postgres", free_port())
    postgres.start(durable=False)
    try:
        await database.migrate(postgres.url)
        pool = await database.connect(postgres.url, max_size=2)
        try:
            await pool.execute(SETUP)
            print(f"seeding {members:,} members", flush=True)
            await seed(pool, 1, members)
            await make_email(pool, "e-plain", PLAIN)
            await make_email(pool, "e-filter", FILTER)
            settings = load_settings(database_url=postgres.url)
            activities = BatchCreationActivities(Dependencies(settings=settings, pool=pool, provider=None,
                                                              temporal=None))
            print(f"batch creation, {members:,} members ({repeat} runs each, best and median):")
            for chunked in (False, True):
                for email_id, recipient_filter in (("e-plain", PLAIN), ("e-filter", FILTER)):
                    best, median, n = await timed(pool, activities, email_id, chunked, repeat)
                    print(f"  {'chunked' if chunked else 'one statement':<14} {recipient_filter:<38} "
                          f"{n:>8,} recipients  best {best * 1000:8.1f} ms  median {median * 1000:8.1f} ms  "
                          f"({best * 1e6 / max(n, 1):6.1f} ms per 1,000 recipients, best)", flush=True)
            await forget(pool, "e-filter")
            if plan_members > members:
                print(f"growing the site to {plan_members:,} members", flush=True)
                await seed(pool, members + 1, plan_members)
            await plans(pool, max(members, plan_members))
        finally:
            await pool.close()
    finally:
        postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--plan-members", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.members, arguments.plan_members, arguments.repeat))

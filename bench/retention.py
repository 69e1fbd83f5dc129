"""Benchmark: what the retention fold takes back (not a test).

Starts its own PostgreSQL, writes one finished email of N recipients in bulk (rows generated with
generate_series, not sent: as a send leaves them, with a third opened), then measures the bytes of
email_recipients (table and indexes) per recipient, the time of the fold and drop (chunk by chunk),
and the bytes after it and a VACUUM (the space a later send reuses).

    .venv/bin/python bench/retention.py --members 100000
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from activities.retention import fold_due
from devstack.servers import Postgres, free_port
from pressroom import database

SEED = """
WITH n AS (INSERT INTO newsletters (name, slug, sender_email) VALUES ('Weekly', 'weekly', 'w@example.com')
           RETURNING id),
p AS (INSERT INTO posts (title, slug, status, published_at, newsletter_id)
      SELECT 'Issue', 'issue', 'published', now() - interval '200 days', id FROM n RETURNING id, newsletter_id),
e AS (INSERT INTO emails (post_id, newsletter_id, subject, status, submitted_at, email_count)
      SELECT id, newsletter_id, 'Issue', 'submitted', now() - interval '200 days', $1 FROM p RETURNING id),
b AS (INSERT INTO email_batches (email_id, status, provider_id, send_outcome)
      SELECT e.id, 'submitted', 'bench-' || g, 'accepted' FROM e, generate_series(1, ceil($1 / 1000.0)::int) g
      RETURNING id, email_id, provider_id)
INSERT INTO email_recipients (email_id, member_id, batch_id, member_uuid, member_email, member_name, processed_at,
                              delivered_at, opened_at)
SELECT b.email_id, 'member-' || g, b.id, gen_random_uuid(), 'm' || g || '@example.com', 'Member ' || g,
       now() - interval '200 days', now() - interval '200 days',
       CASE WHEN g % 3 = 0 THEN now() - interval '199 days' END
FROM generate_series(1, $1) g JOIN b ON b.provider_id = 'bench-' || ((g - 1) / 1000 + 1)"""
SIZE = "SELECT pg_table_size('email_recipients'), pg_indexes_size('email_recipients')"


async def measure(url: str, members: int, chunk: int) -> None:
    pool = await database.connect(url, max_size=4)
    try:
        started = time.perf_counter()
        await pool.execute(SEED, members)
        await pool.execute("VACUUM ANALYZE email_recipients")
        print(f"{members:,} rows written in {time.perf_counter() - started:.1f} s")
        table, indexes = await pool.fetchrow(SIZE)
        print(f"before: table {table / 1e6:.1f} MB + indexes {indexes / 1e6:.1f} MB = "
              f"{(table + indexes) / members:.0f} bytes per recipient")
        for name, size in await pool.fetch("SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) "
                                           "FROM pg_index WHERE indrelid = 'email_recipients'::regclass ORDER BY 1"):
            print(f"  {name}: {size / members:.0f} bytes per recipient")
        started = time.perf_counter()
        result = await fold_due(pool, 180, chunk)
        elapsed = time.perf_counter() - started
        print(f"fold and drop: {result.rows_dropped:,} rows in {result.chunks} chunks of {chunk:,}, {elapsed:.2f} s "
              f"({elapsed / max(result.chunks, 1) * 1000:.0f} ms a chunk)")
        await pool.execute("VACUUM email_recipients")
        table, indexes = await pool.fetchrow(SIZE)
        folded = await pool.fetchval("SELECT pg_total_relation_size('member_figures_folded') "
                                     "+ pg_total_relation_size('email_figures_folded')")
        print(f"after VACUUM: email_recipients table {table / 1e6:.1f} MB + indexes {indexes / 1e6:.1f} MB, free for "
              f"later sends; folded figures {folded / members:.0f} bytes per member (once per member, not per send)")
    finally:
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=10_000)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="pressroom-bench-retention-"))
    server = Postgres(folder, free_port())
    server.start(durable=False)
    try:
        async def run() -> None:
            await database.migrate(server.url)
            await measure(server.url, args.members, args.chunk)
        asyncio.run(run())
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Benchmark: PostgreSQL's own work for analytics' apply and aggregates, next to the raw UPDATE (not a test).

bench/analytics.py times the whole fetch; this one leaves HTTP and parsing out and drives the
set-based apply (activities/delivery_events/apply.py) directly with pages of 3,000 events, for N
recipients with a delivered and an opened event each, and prints per step the wall time, the
PostgreSQL server's CPU and the WAL it wrote:

- two phases, as the schedule reads them: every `opened` page, then every `delivered` page (each
  recipient row is written twice, in two transactions), then the aggregates;
- one phase whose pages hold both events of their recipients (the missing and backfill phases,
  pushed webhooks): the events fold into one write per recipient;
- the raw baseline of bench/analytics.py: the same first-wins updates as one statement.

    .venv/bin/python bench/analytics_writes.py --recipients 100000 [--members-fillfactor N] [--recipients-fillfactor N]
        [--without-index NAME ...]

The tables' fillfactors and indexes are the schema's unless given.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg

from activities.delivery_events.aggregates import aggregate
from activities.delivery_events.apply import apply_batch
from bench.analytics import RAW, RESET, SEED
from bench.processes import cpu_seconds_by_family
from devstack.servers import Postgres, free_port
from pressroom import database
from pressroom.delivery_events import DeliveryEvent
from pressroom.store.events import EventBatch

PAGE_EVENTS = 3000  # events per transaction, as activities.analytics.window.APPLY_EVENTS
FRESH = RESET + """
UPDATE members SET email_count = 0, email_opened_count = 0, email_open_rate = NULL;
TRUNCATE email_analytics_dirty_members;
"""


async def fresh(pool: asyncpg.Pool) -> None:
    """Every time empty again, and the dead row versions that made it so cleared away."""
    await pool.execute(FRESH)
    await pool.execute("VACUUM email_recipients, members")


async def measure(pool: asyncpg.Pool, name: str, work: Callable[[], Awaitable[object]]) -> float:
    lsn = await pool.fetchval("SELECT pg_current_wal_lsn()")
    cpu, began = cpu_seconds_by_family()["postgres"], time.perf_counter()
    await work()
    wall, cpu = time.perf_counter() - began, cpu_seconds_by_family()["postgres"] - cpu
    wal = await pool.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)", lsn)
    print(f"  {name:18s} {wall:7.2f} s   PostgreSQL CPU {cpu:6.2f} s   WAL {wal / 2**20:7.1f} MiB")
    return cpu


async def main(recipients: int, fillfactors: dict[str, int | None], without: list[str]) -> None:
    folder = Path(tempfile.mkdtemp(prefix="pressroom-bench-"))
    postgres = Postgres(folder / "postgres", free_port())
    postgres.start(durable=False)
    try:
        await database.migrate(postgres.url)
        pool = await database.connect(postgres.url, max_size=4)
        for table, fillfactor in fillfactors.items():
            if fillfactor is not None:
                await pool.execute(f"ALTER TABLE {table} SET (fillfactor = {fillfactor})")
        known = {row[0] for row in await pool.fetch(
            "SELECT indexname FROM pg_indexes WHERE tablename IN ('email_recipients', 'members')")}
        if unknown := sorted(set(without) - known):
            await pool.close()
            raise SystemExit(f"--without-index: {', '.join(unknown)} is not an index of email_recipients or members "
                             f"({', '.join(sorted(known))})")
        for index in without:
            await pool.execute(f'DROP INDEX "{index}"')
        shown = await pool.fetch(
            "SELECT relname, coalesce((SELECT option_value FROM pg_options_to_table(reloptions) "
            "WHERE option_name = 'fillfactor'), '100') AS fillfactor FROM pg_class "
            "WHERE relname = ANY($1::text[]) ORDER BY relname", list(fillfactors))
        await pool.execute(SEED.format(members=recipients, recipients=recipients))
        start = time.time() - 3600

        async def pages(kinds: list[tuple[str, float]]) -> None:
            per = PAGE_EVENTS // len(kinds)
            for first in range(0, recipients, per):
                batch = EventBatch()
                batch.events = [DeliveryEvent(provider="mailgun", event_id=f"{kind}-{n}", kind=kind, name=kind,
                                              timestamp=start + n / 1000 + later, recipient=f"member{n}@example.com",
                                              email_id="e0")
                                for n in range(first, min(recipients, first + per)) for kind, later in kinds]
                await apply_batch(pool, batch, "poll")

        async def aggregates() -> None:
            async with pool.acquire() as conn, conn.transaction():
                await aggregate(conn)

        print(f"{recipients:,} recipients, a delivered and an opened event each, pages of {PAGE_EVENTS:,} events, "
              "fillfactor " + ", ".join(f"{row['relname']} {row['fillfactor']}" for row in shown)
              + (f", without {', '.join(without)}" if without else ""))
        print(" two phases (opened pages, then delivered pages):")
        two = await measure(pool, "opened pages", lambda: pages([("opened", 4)]))
        two += await measure(pool, "delivered pages", lambda: pages([("delivered", 0)]))
        two += await measure(pool, "aggregates", aggregates)
        await fresh(pool)
        print(" one phase, both events of a recipient in its page (folded):")
        folded = await measure(pool, "folded pages", lambda: pages([("delivered", 0), ("opened", 4)]))
        folded += await measure(pool, "aggregates", aggregates)
        await fresh(pool)
        addresses = [f"member{n}@example.com" for n in range(recipients)]
        raw = await measure(pool, "raw one UPDATE", lambda: pool.execute(RAW, addresses, [start + 1.0] * recipients))
        print(f" PostgreSQL CPU, raw against the pipeline's: two phases {raw / two:.3f}x, folded {raw / folded:.3f}x")
        await pool.close()
    finally:
        postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipients", type=int, default=100_000)
    for table in ("members", "recipients"):
        parser.add_argument(f"--{table}-fillfactor", type=int, choices=range(10, 101), metavar="10-100")
    parser.add_argument("--without-index", action="append", default=[], metavar="NAME",
                        help="drop this index first, to see what keeping it costs the writes")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.recipients, {"members": arguments.members_fillfactor,
                                            "email_recipients": arguments.recipients_fillfactor},
                     arguments.without_index))

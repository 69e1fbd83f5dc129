"""Benchmark: `members import` of a list in the reference platform's export format (not a test).

Starts its own PostgreSQL with one newsletter new members subscribe to, writes a CSV of `--rows`
members (names, notes, labels, some comped, some unsubscribed), then times, in the same run:
the import into an empty site (every row checked and inserted, subscriptions written), the same
file imported again (every row matched, nothing changed), and a raw COPY of the same file into a
table of text columns (no checks, no matching, no index but none): the floor set by PostgreSQL.
It prints the process's peak resident memory before and after the first import: the file is
streamed, so what the import adds stays about one chunk's worth whatever the file's size.
`--welcome` queues each new member's welcome email; `--hash-key` sets PRESSROOM_ADDRESS_HASH_KEY, so
that every row is looked up among the suppressions deleted members left.

    .venv/bin/python bench/members_import.py --rows 100000 [--welcome] [--hash-key]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devstack.servers import Postgres, free_port
from operations.member_import import import_members
from pressroom import database
from pressroom.settings import load_settings

HEADER = ["id", "email", "name", "note", "subscribed_to_emails", "complimentary_plan", "stripe_customer_id",
          "created_at", "deleted_at", "labels", "tiers"]


def write_file(path: Path, rows: int) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        for n in range(rows):
            writer.writerow([f"{n:024x}", f"reader{n}@bench.example", f"Reader {n}",
                             "met at the launch" if n % 10 == 0 else "", "false" if n % 20 == 0 else "true",
                             "true" if n % 50 == 0 else "false", "", f"2023-01-{n % 28 + 1:02d}T10:00:00.000Z", "",
                             "vip,press" if n % 7 == 0 else "", ""])


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def timed(name: str, rows: int, work) -> object:
    """Reading, checking and writing are interleaved (the file is streamed a chunk at a time): one figure."""
    began = time.perf_counter()
    result = await work()
    seconds = time.perf_counter() - began
    print(f"  {name:<40} {seconds:7.2f} s {rows / seconds:10,.0f} rows/s", flush=True)
    return result


async def main(rows: int, welcome: bool, hash_key: bool) -> None:
    folder = Path(tempfile.mkdtemp(prefix="pressroom-bench-import-"))
    postgres = Postgres(folder / "postgres", free_port())
    postgres.start(durable=False)
    try:
        await database.migrate(postgres.url)
        settings = load_settings(database_url=postgres.url,
                                 address_hash_key="bench-site-key-0123456789abcdef" if hash_key else "")
        conn = await database.connect_once(postgres.url)
        try:
            await conn.execute("INSERT INTO newsletters (name, slug) VALUES ('Weekly', 'weekly')")
            file = folder / "members.csv"
            write_file(file, rows)
            print(f"{rows:,} rows, {file.stat().st_size / 1e6:.1f} MB:", flush=True)
            print(f"  peak RSS before the import: {peak_rss_mb():,.0f} MB", flush=True)
            first = await timed("members import (an empty site)", rows,
                                lambda: import_members(file, welcome=welcome, settings=settings))
            print(f"  peak RSS after the first import: {peak_rss_mb():,.0f} MB", flush=True)
            again = await timed("members import again (nothing changes)", rows,
                                lambda: import_members(file, welcome=welcome, settings=settings))
            await conn.execute(f"CREATE TABLE raw_copy ({', '.join(f'{c} text' for c in HEADER)})")
            await timed("raw COPY of the same file (no checks)", rows,
                        lambda: conn.copy_to_table("raw_copy", source=str(file), format="csv", header=True))
            members = await conn.fetchval("SELECT count(*) FROM members")
            subscribed = await conn.fetchval("SELECT count(*) FROM members_newsletters")
        finally:
            await conn.close()
        print(f"first import: {first.added:,} added, {len(first.refused):,} refused, "
              f"{first.welcome_queued:,} welcome emails queued; again: {again.added:,} added, "
              f"{again.updated:,} updated, {again.unchanged:,} unchanged; {members:,} members, "
              f"{subscribed:,} subscriptions")
    finally:
        postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--welcome", action="store_true", help="queue the new members' welcome emails")
    parser.add_argument("--hash-key", action="store_true", help="look every row up among deleted members' "
                                                                "suppressions")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.rows, arguments.welcome, arguments.hash_key))

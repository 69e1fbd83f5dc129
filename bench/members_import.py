"""Benchmark: `members import` of a list in the reference platform's export format (not a test).

For each `--rows` size, starts its own PostgreSQL with one newsletter new members subscribe to,
writes a CSV of that many members (names, notes, labels, some comped, some unsubscribed), then
times, in the same run:

- the import into an empty site (every row checked and inserted, subscriptions and labels written);
- the raw baseline: a COPY of the rows the import stored (read back from its tables, untimed) into
  twins of those tables made in a schema of their own (`LIKE … INCLUDING ALL`, the same storage
  parameters, foreign keys and triggers; the twins' count of indexes, constraints and triggers is
  printed beside the real ones'), in one transaction: the floor PostgreSQL sets for writing those
  rows with their indexes and constraints, with no file to read, no check and no matching;
- the same file imported again (every row matched, nothing changed).

It prints rows/s, the import's time over the COPY's, the CPU seconds of this process and of
PostgreSQL during each, and the process's peak resident memory before and after the first import
(the file is streamed, so what the import adds stays about a chunk's worth whatever its size).
`--welcome` queues each new member's welcome email (the outbox is then copied too); `--hash-key`
sets PRESSROOM_ADDRESS_HASH_KEY, so that every row is looked up among the suppressions deleted
members left; `--statements` loads pg_stat_statements and prints the first import's costliest
statements.

    .venv/bin/python bench/members_import.py --rows 100000,1000000 [--welcome] [--hash-key] [--statements]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.newsletter import preload_statement_statistics, print_statements
from bench.processes import cpu_seconds_by_family
from devstack.servers import Postgres, free_port
from operations.member_import import import_members
from pressroom import database
from pressroom.settings import load_settings

HEADER = ["id", "email", "name", "note", "subscribed_to_emails", "complimentary_plan", "stripe_customer_id",
          "created_at", "deleted_at", "labels", "tiers"]
# What an import writes, parents first (the order the COPY fills the twins in).
WRITTEN = ["members", "labels", "members_newsletters", "members_labels", "members_products", "outbox"]
TWINS = "raw"  # the schema the baseline's tables are made in


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


async def timed(name: str, rows: int, work) -> tuple[object, float, float]:
    """Reading, checking and writing are interleaved (the file is streamed a chunk at a time): one
    figure, with the CPU this process and PostgreSQL spent meanwhile."""
    cpu = cpu_seconds_by_family()
    began = time.perf_counter()
    result = await work()
    seconds = time.perf_counter() - began
    cpu = cpu_seconds_by_family() - cpu
    print(f"  {name:<52} {seconds:7.2f} s {rows / seconds:10,.0f} rows/s   "
          f"CPU: this process {cpu['python']:6.2f} s, PostgreSQL {cpu['postgres']:6.2f} s", flush=True)
    return result, seconds, cpu["python"] + cpu["postgres"]


_SHAPE = """
SELECT (SELECT count(*) FROM pg_index i WHERE i.indrelid = c.oid) AS indexes,
       (SELECT count(*) FROM pg_constraint k WHERE k.conrelid = c.oid) AS constraints,
       (SELECT count(*) FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal) AS triggers
FROM pg_class c WHERE c.oid = $1::regclass"""


async def make_twins(conn, tables: list[str]) -> str:
    """Empty twins of `tables` in schema TWINS: columns, defaults, checks, indexes (LIKE … INCLUDING
    ALL), storage parameters, foreign keys (to a twin where the parent has one) and triggers.
    Returns what they hold, next to the originals, for the reader to compare."""
    await conn.execute(f"CREATE SCHEMA {TWINS}")
    for table in tables:
        options = await conn.fetchval("SELECT reloptions FROM pg_class WHERE oid = $1::regclass", table)
        storage = f" WITH ({', '.join(options)})" if options else ""
        await conn.execute(f"CREATE TABLE {TWINS}.{table} (LIKE public.{table} INCLUDING ALL){storage}")
    for table in tables:
        for key in await conn.fetch("SELECT conname, confrelid::regclass::text AS parent, "
                                    "pg_get_constraintdef(oid) AS definition FROM pg_constraint "
                                    "WHERE conrelid = $1::regclass AND contype = 'f'", table):
            definition = key["definition"]
            if key["parent"] in tables:
                definition = definition.replace(f"REFERENCES {key['parent']}(", f"REFERENCES {TWINS}.{key['parent']}(")
            await conn.execute(f"ALTER TABLE {TWINS}.{table} ADD CONSTRAINT {key['conname']} {definition}")
        for trigger in await conn.fetch("SELECT pg_get_triggerdef(oid) AS definition FROM pg_trigger "
                                        "WHERE tgrelid = $1::regclass AND NOT tgisinternal", table):
            definition = trigger["definition"].replace(f" ON public.{table} ", f" ON {table} ")
            await conn.execute(definition.replace(f" ON {table} ", f" ON {TWINS}.{table} "))
    shapes = []
    for table in tables:
        real, twin = await conn.fetchrow(_SHAPE, table), await conn.fetchrow(_SHAPE, f"{TWINS}.{table}")
        if tuple(real) != tuple(twin):
            raise RuntimeError(f"the twin of {table} differs: {dict(twin)} against {dict(real)}")
        shapes.append(f"{table} {real['indexes']}/{real['constraints']}/{real['triggers']}")
    return ", ".join(shapes)


async def stored_rows(conn, tables: list[str]) -> dict[str, bytes]:
    """Each table's rows as the import stored them, in COPY's binary format."""
    rows = {}
    for table in tables:
        buffer = io.BytesIO()

        async def keep(data: bytes, buffer=buffer) -> None:
            buffer.write(data)

        await conn.copy_from_table(table, output=keep, format="binary")
        rows[table] = buffer.getvalue()
    return rows


async def raw_copy(conn, rows: dict[str, bytes]) -> None:
    """The stored rows COPYed into the twins, in one transaction, as an import commits them."""
    async with conn.transaction():
        for table, data in rows.items():
            await conn.copy_to_table(table, schema_name=TWINS, source=io.BytesIO(data), format="binary")


async def one_size(rows: int, welcome: bool, hash_key: bool, again: bool, statements: bool) -> tuple[float, float]:
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
            if statements:
                await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                await conn.execute("SELECT pg_stat_statements_reset()")
            first, import_seconds, import_cpu = await timed("members import (an empty site)", rows,
                                                lambda: import_members(file, welcome=welcome, settings=settings))
            print(f"  peak RSS after the first import: {peak_rss_mb():,.0f} MB", flush=True)
            if statements:
                await print_statements(conn)
            tables = [t for t in WRITTEN if t != "outbox" or welcome]
            shapes = await make_twins(conn, tables)
            stored = await stored_rows(conn, tables)
            counts = {t: await conn.fetchval(f"SELECT count(*) FROM {t}") for t in tables}
            _, copy_seconds, copy_cpu = await timed("raw COPY of the stored rows into indexed twins", rows,
                                          lambda: raw_copy(conn, stored))
            repeated = await timed("members import again (nothing changes)", rows,
                                   lambda: import_members(file, welcome=welcome, settings=settings)) if again else None
        finally:
            await conn.close()
        print(f"  import / raw COPY: {import_seconds / copy_seconds:.2f}x the time, "
              f"{copy_seconds / import_seconds:.2f}x its rate (target >= 0.5x); CPU of this process and "
              f"PostgreSQL: {import_cpu:.2f} s against {copy_cpu:.2f} s, {copy_cpu / import_cpu:.2f}x")
        print(f"  copied: {', '.join(f'{t} {n:,}' for t, n in counts.items())} rows; "
              f"indexes/constraints/triggers, the same in the twins: {shapes}")
        print(f"  first import: {first.added:,} added, {len(first.refused):,} refused, "
              f"{first.welcome_queued:,} welcome emails queued")
        if repeated:
            report = repeated[0]
            print(f"  again: {report.added:,} added, {report.updated:,} updated, {report.unchanged:,} unchanged, "
                  f"{report.welcome_queued:,} welcome emails queued")
        return import_seconds, copy_seconds
    finally:
        postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)


async def main(sizes: list[int], welcome: bool, hash_key: bool, again: bool, statements: bool) -> None:
    if statements:
        preload_statement_statistics()
    results = {rows: await one_size(rows, welcome, hash_key, again, statements) for rows in sizes}
    print("import rate / raw COPY rate: " + "; ".join(
        f"{rows:,} rows {copy / took:.2f}x" for rows, (took, copy) in results.items()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="100000", help="sizes, comma-separated (100000,1000000)")
    parser.add_argument("--welcome", action="store_true", help="queue the new members' welcome emails")
    parser.add_argument("--hash-key", action="store_true", help="look every row up among deleted members' "
                                                                "suppressions")
    parser.add_argument("--statements", action="store_true",
                        help="load pg_stat_statements and print the first import's costliest statements")
    parser.add_argument("--no-again", dest="again", action="store_false", help="skip the second import")
    arguments = parser.parse_args()
    asyncio.run(main([int(size) for size in arguments.rows.split(",")], arguments.welcome, arguments.hash_key,
                     arguments.again, arguments.statements))

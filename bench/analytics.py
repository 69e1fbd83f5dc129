"""Benchmark: one analytics fetch of M events for an email with N recipients (not a test).

Starts its own PostgreSQL and Mailgun simulator (a separate process, as Mailgun is), seeds one
email with N = M/2 recipients and M synthetic events (delivered + opened each), runs the phases'
activities and the aggregates, and prints events per minute applied (fetch + apply + aggregate)
next to the raw figure: the same recipient updates as ONE set-based statement, in the same run.
Then it times the aggregates for 100,000 members.

    .venv/bin/python bench/analytics.py --events 500000
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from temporalio.testing import ActivityEnvironment

from activities.analytics.models import AggregateInput, FetchPhaseInput
from activities.analytics.run import AnalyticsActivities
from bench.processes import cpu_seconds_by_family
from devstack.servers import Postgres, free_port, start_simulator, stop_process
from pressroom import database
from pressroom.dependencies import Dependencies
from pressroom.providers.mailgun import MailgunClient
from pressroom.settings import load_settings
from worker import tune_garbage_collection

KEY, DOMAIN = "key-bench-00000000", "mg.bench.example"

SEED = """
INSERT INTO newsletters (id, name, slug) VALUES ('nl1', 'Weekly', 'weekly');
INSERT INTO members (id, email)
  SELECT 'm' || n, 'member' || n || '@example.com' FROM generate_series(0, {members} - 1) n;
INSERT INTO posts (id, title, slug) VALUES ('p0', 'Bench', 'bench');
INSERT INTO emails (id, post_id, newsletter_id, subject, status) VALUES ('e0', 'p0', 'nl1', 'Bench', 'submitted');
INSERT INTO email_batches (id, email_id) SELECT 'b' || k, 'e0' FROM generate_series(0, ({recipients} - 1) / 1000) k;
INSERT INTO email_recipients (email_id, member_id, batch_id, member_uuid, member_email)
SELECT 'e0', m.id, 'b' || (substr(m.id, 2)::int / 1000), m.uuid, m.email FROM members m
WHERE substr(m.id, 2)::int < {recipients};
ANALYZE;
"""

RESET = """
UPDATE email_recipients SET delivered_at = NULL, opened_at = NULL WHERE email_id = 'e0';
UPDATE emails SET delivered_count = 0, opened_count = 0;
TRUNCATE email_analytics_dirty_emails, email_analytics_dirty_members;
"""

# The raw baseline: the same first-wins updates for every event, in one statement.
RAW = """
UPDATE email_recipients er SET delivered_at = COALESCE(er.delivered_at, to_timestamp(x.ts)),
                               opened_at = COALESCE(er.opened_at, to_timestamp(x.ts + 4))
FROM unnest($1::text[], $2::float8[]) AS x(address, ts)
WHERE er.email_id = 'e0' AND er.member_email = x.address"""


class Cpu:
    """CPU seconds of this process, the simulator and the PostgreSQL server since the last mark."""

    def __init__(self, simulator: int) -> None:
        self.simulator = simulator
        self.last = self.now()

    def now(self) -> tuple[float, float, float]:
        ours, simulator = cpu_seconds_by_family(), cpu_seconds_by_family(self.simulator)["python"]
        return ours["python"] - simulator, simulator, ours["postgres"]

    def mark(self) -> list[float]:
        now = self.now()
        spent = [b - a for a, b in zip(self.last, now, strict=True)]
        self.last = now
        return spent

    @staticmethod
    def text(spent: list[float]) -> str:
        return f"CPU: pipeline process {spent[0]:.2f} s, simulator {spent[1]:.2f} s, PostgreSQL {spent[2]:.2f} s"


async def main(events: int, aggregate_members: int) -> None:
    recipients = events // 2
    folder = Path(tempfile.mkdtemp(prefix="pressroom-bench-"))
    postgres = Postgres(folder / "postgres", free_port())
    postgres.start(durable=False)
    sim_port = free_port()
    simulator = start_simulator(port=sim_port, api_key=KEY, domain=DOMAIN, log=folder / "simulator.log")
    try:
        url = postgres.url
        await database.migrate(url)
        pool = await database.connect(url, max_size=10)
        base = f"http://127.0.0.1:{sim_port}"
        await pool.execute(SEED.format(members=max(recipients, aggregate_members), recipients=recipients))
        async with httpx.AsyncClient(timeout=600) as admin:
            start = time.time() - 3600
            answer = (await admin.post(f"{base}/_sim/events", json={
                "email_id": "e0", "count": recipients, "address_pattern": "member{n}@example.com",
                "events": ["delivered", "opened"], "timestamp": start, "spread_seconds": 1800})).json()
        assert answer["events"] == events, answer
        settings = load_settings(database_url=url, mailgun_base_url=base, mailgun_api_key=KEY, mailgun_domain=DOMAIN,
                                 analytics_max_opened_events=events, analytics_end_margin_seconds=0)
        now = datetime.now(UTC)
        async with MailgunClient.from_settings(settings) as mailgun:
            deps = Dependencies(settings=settings, pool=pool, provider=mailgun, temporal=None)
            acts, env = AnalyticsActivities(deps), ActivityEnvironment()
            cpu = Cpu(simulator.pid)
            began = time.perf_counter()
            phases = [await env.run(acts.fetch_phase, FetchPhaseInput(phase=p, now=now))
                      for p in ("latest-opened", "latest", "missing", "backfill")]
            fetched = time.perf_counter()
            fetch_cpu = cpu.mark()
            aggregate = await env.run(acts.aggregate_stats, AggregateInput())
            total = time.perf_counter() - began
            aggregate_cpu = cpu.mark()
        read = sum(p.events for p in phases)
        applied = sum(p.applied for p in phases)
        counts = await pool.fetchrow("SELECT delivered_count, opened_count FROM emails WHERE id = 'e0'")
        assert read == events and applied == events, (read, applied)
        assert (counts["delivered_count"], counts["opened_count"]) == (recipients, recipients), counts

        # Raw: the same updates in one statement (no fetching, no parsing, no cursors).
        await pool.execute(RESET)
        addresses = [f"member{n}@example.com" for n in range(recipients)]
        stamps = [start + 1.0] * recipients
        cpu.mark()
        raw_began = time.perf_counter()
        await pool.execute(RAW, addresses, stamps)
        raw = time.perf_counter() - raw_began
        raw_cpu = cpu.mark()

        # Aggregates for `aggregate_members` members, each of whose figures change (a member whose
        # figures come out as stored is not written).
        await pool.execute("UPDATE members SET email_count = 0, email_opened_count = 0, email_open_rate = NULL")
        await pool.execute("INSERT INTO email_analytics_dirty_members SELECT id FROM members "
                           "ORDER BY id LIMIT $1", aggregate_members)
        agg_began = time.perf_counter()
        async with MailgunClient.from_settings(settings) as mailgun:
            deps = Dependencies(settings=settings, pool=pool, provider=mailgun, temporal=None)
            members_result = await ActivityEnvironment().run(AnalyticsActivities(deps).aggregate_stats,
                                                             AggregateInput())
        agg = time.perf_counter() - agg_began
        await pool.close()

        per_minute = events / total * 60
        raw_per_minute = events / raw * 60
        print(f"analytics fetch: M={events:,} events, N={recipients:,} recipients")
        pages = sum(p.pages for p in phases)
        print(f"  fetch+apply      {fetched - began:8.2f} s  ({pages:,} pages)   {Cpu.text(fetch_cpu)}")
        print("    by phase: " + ", ".join(f"{p.phase} {p.seconds:.2f} s ({p.events:,} events)" for p in phases))
        print(f"  aggregate        {aggregate.seconds:8.2f} s  "
              f"({aggregate.emails} emails, {aggregate.members:,} members)"
              f"   {Cpu.text(aggregate_cpu)}")
        print(f"  total            {total:8.2f} s  -> {per_minute:,.0f} events/min applied "
              f"(target 250,000; the specified minimum is 2,500)")
        print(f"  raw one UPDATE   {raw:8.2f} s  -> {raw_per_minute:,.0f} events/min   {Cpu.text(raw_cpu)}")
        print(f"  ratio pipeline/raw: {per_minute / raw_per_minute:.3f}")
        own = fetch_cpu[2] + aggregate_cpu[2]
        # PostgreSQL works one statement at a time for each: on an idle machine the pipeline's wall time
        # cannot fall below its server CPU time, so this is the best ratio fetching for free would give.
        print(f"  PostgreSQL's own CPU: pipeline {own:.2f} s, raw {raw_cpu[2]:.2f} s -> {raw_cpu[2] / own:.3f}x raw "
              f"if fetching and parsing cost nothing")
        print(f"aggregates for {members_result.members:,} members: {agg:.2f} s (target < 10 s)")
    finally:
        stop_process(simulator.pid)
        postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500_000, help="M, an even number of events")
    parser.add_argument("--aggregate-members", type=int, default=100_000)
    arguments = parser.parse_args()
    tune_garbage_collection()  # as the worker process does
    asyncio.run(main(arguments.events, arguments.aggregate_members))

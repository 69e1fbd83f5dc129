"""Benchmark: outbox entries from commit to ledger, against raw workflows on the same server (not a test).

Starts its own PostgreSQL and Temporal dev server and a worker with the relay, then, for each N:
  1. a burst: N NoopEvent entries committed at once; entries per second from the first commit to
     the last ledger row, and p50/p99 latency commit → handled (outbox.created_at → ledger row);
  2. the raw figure in the same run, right after: N trivial one-activity workflows started and
     completed on the same server, by a worker in the same process;
  3. the CPU time per entry (per workflow) of this process, the Temporal server and PostgreSQL;
and first, on the idle engine, a steady stream of 10 entries a second for `--steady-seconds`:
p50/p99 latency.

    .venv/bin/python bench/outbox.py --entries 1000 10000
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio import activity, workflow
from temporalio.worker import Worker

from activities.outbox import NOTIFY_CHANNEL, enqueue, payload_digest
from bench.processes import cpu_seconds_by_family
from bench.servers import bench_servers
from operations.outbox import ensure_relay
from pressroom import database
from pressroom.settings import load_settings
from worker import running_worker, tune_garbage_collection

LATENCY = """SELECT extract(epoch FROM l.created_at - o.created_at) * 1000 AS ms
             FROM outbox o JOIN idempotency_ledger l USING (idempotency_key) WHERE o.idempotency_key LIKE $1"""


@activity.defn
async def nothing() -> None:
    return None


@workflow.defn(sandboxed=False)
class TrivialWorkflow:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity(nothing, start_to_close_timeout=timedelta(seconds=30))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def wait_for_ledger(pool, pattern: str, count: int, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while await pool.fetchval("SELECT count(*) FROM idempotency_ledger WHERE idempotency_key LIKE $1",
                              pattern) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{pattern}: not drained in {timeout} s")
        await asyncio.sleep(0.05)


async def pipeline_burst(pool, n: int) -> tuple[float, list[float], float]:
    """N entries committed at once: seconds to the last ledger row, latencies, mean open deliveries."""
    prefix = f"burst{n}-"
    started = time.perf_counter()
    await pool.execute(
        "INSERT INTO outbox (event_type, payload, idempotency_key, payload_digest) "
        "SELECT 'NoopEvent', '{}', $3 || k, $2 FROM generate_series(1, $1) k",
        n, payload_digest({}), prefix)
    await pool.execute("SELECT pg_notify($1, '')", NOTIFY_CHANNEL)
    open_counts: list[int] = []

    async def sample_open() -> None:  # whether the relay keeps the engine fed (PRESSROOM_OUTBOX_MAX_OPEN_DELIVERIES)
        while True:
            await asyncio.sleep(1)
            open_counts.append(await pool.fetchval("SELECT count(*) FROM outbox WHERE status = 'sending'"))
    sampler = asyncio.create_task(sample_open())
    try:
        await wait_for_ledger(pool, f"{prefix}%", n)
    finally:
        sampler.cancel()
    seconds = time.perf_counter() - started
    latency = [float(r["ms"]) for r in await pool.fetch(LATENCY, f"{prefix}%")]
    return seconds, latency, sum(open_counts) / max(1, len(open_counts))


async def raw_burst(client, n: int, open_at_most: int) -> float:
    """N trivial one-activity workflows started (64 at a time) and awaited, on their own worker; at
    most `open_at_most` open at once, as the relay keeps deliveries (and the server limits waits)."""
    async with Worker(client, task_queue="raw", workflows=[TrivialWorkflow], activities=[nothing],
                      max_concurrent_activities=1000):
        started = time.perf_counter()
        starting, running = asyncio.Semaphore(64), asyncio.Semaphore(open_at_most)

        async def one(k: int) -> None:
            async with running:
                async with starting:
                    handle = await client.start_workflow(TrivialWorkflow.run, id=f"raw{n}-{k}", task_queue="raw")
                await handle.result()
        await asyncio.gather(*(one(k) for k in range(n)))
        return time.perf_counter() - started


async def main(args: argparse.Namespace) -> None:
    async with bench_servers() as servers:
        env = servers.env
        settings = load_settings(database_url=servers.database_url, mailgun_api_key="unused", mailgun_domain="unused",
                                 task_queue="bench", outbox_poll_interval_seconds=0.5)
        pool = await database.connect(servers.database_url, max_size=10)
        print(f"outbox: bursts of NoopEvent entries, relay batch {settings.outbox_batch}, "
              f"at most {settings.outbox_max_open_deliveries} open deliveries (and raw workflows)", flush=True)
        # The steady stream first, on an idle engine, so that no burst's backlog is in its figure.
        async with running_worker(env.client, settings):
            await ensure_relay(env.client, settings)
            for k in range(int(args.steady_seconds * 10)):
                async with pool.acquire() as conn, conn.transaction():
                    await enqueue(conn, "NoopEvent", {"k": k}, idempotency_key=f"steady-{k}")
                await asyncio.sleep(0.1)
            await wait_for_ledger(pool, "steady-%", int(args.steady_seconds * 10))
        steady = [float(r["ms"]) for r in await pool.fetch(LATENCY, "steady-%")]
        print(f"  steady 10 entries/s for {args.steady_seconds:.0f} s: p50 {percentile(steady, 0.5):,.0f} ms  "
              f"p99 {percentile(steady, 0.99):,.0f} ms (target p99 < 1,000 ms)", flush=True)
        for n in args.entries:
            # Each burst beside its raw figure, measured right after it on the same servers.
            async with running_worker(env.client, settings):
                await ensure_relay(env.client, settings)
                before = cpu_seconds_by_family()
                seconds, latency, open_mean = await pipeline_burst(pool, n)
                burst_cpu = cpu_seconds_by_family() - before
            before = cpu_seconds_by_family()
            raw = await raw_burst(env.client, n, settings.outbox_max_open_deliveries)
            raw_cpu = cpu_seconds_by_family() - before
            print(f"  N={n:,}")
            print(f"    pipeline (first commit → last ledger row)  {seconds:7.2f} s  {n / seconds:8,.0f} entries/s  "
                  f"p50 {percentile(latency, 0.5):,.0f} ms  p99 {percentile(latency, 0.99):,.0f} ms  "
                  f"open deliveries {open_mean:,.0f} on average")
            print(f"    raw: {n:,} one-activity workflows{' ' * (13 - len(f'{n:,}'))}  {raw:7.2f} s  "
                  f"{n / raw:8,.0f} workflows/s")
            print(f"    pipeline / raw rate: {raw / seconds:.2f}x (target ≥ 0.9x)")
            for name, cpu in (("pipeline", burst_cpu), ("raw", raw_cpu)):
                print(f"    CPU ms per {'entry   ' if name == 'pipeline' else 'workflow'} ({name}): "
                      + "  ".join(f"{family} {cpu[family] * 1000 / n:5.1f}"
                                  for family in ("python", "temporal", "postgres")), flush=True)
        await pool.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, nargs="+", default=[1000, 10_000],
                        help="burst sizes, each measured beside its own raw figure")
    parser.add_argument("--steady-seconds", type=float, default=20)
    tune_garbage_collection()  # as the worker process does
    asyncio.run(main(parser.parse_args()))

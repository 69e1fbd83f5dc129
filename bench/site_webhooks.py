"""Benchmark: a burst of member events to three webhooks beside welcome emails (not a test).

Starts its own PostgreSQL, Temporal dev server and Mailgun simulator, a worker with the relay, and
three webhook targets over HTTP in this process: `fast` (answers at once), `slow` (answers after
`--slow-seconds`) and `flaky` (503 for `--flaky-seconds`, then 200). Then:
  1. the welcome emails' latency (commit → ledger) with no webhooks: `--welcomes` members added
     one every 0.25 s;
  2. `--members` member.added events committed at once to the three webhooks, and the same welcome
     stream during the burst;
  3. per target: the time until its last delivery is recorded, the events received once after
     deduplication by Idempotency-Key, and the requests on the wire.

    .venv/bin/python bench/site_webhooks.py --members 10000 --in-flight 50
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import web

from activities.outbox import site_events
from bench.servers import SIMULATOR_DOMAIN, SIMULATOR_KEY, bench_servers
from operations.members import add_member
from operations.outbox import ensure_relay
from operations.site_webhooks import create_webhook
from pressroom import database
from pressroom.settings import load_settings
from worker import running_worker, tune_garbage_collection

WELCOME = ("INSERT INTO automated_emails (name, slug, subject, html) VALUES "
           "('Welcome', 'member-welcome-email-free', 'Welcome!', '<p>Welcome %recipient.name%</p>')")
WELCOME_LATENCY = """SELECT extract(epoch FROM l.created_at - o.created_at) * 1000 AS ms
FROM outbox o JOIN idempotency_ledger l USING (idempotency_key)
WHERE o.event_type = 'MemberCreatedEvent' AND o.payload->>'member_id' = ANY($1::text[])"""


class Targets:
    """The three targets: each request counted by path and idempotency key."""

    def __init__(self, slow_seconds: float, flaky_seconds: float) -> None:
        self.slow_seconds, self.flaky_seconds = slow_seconds, flaky_seconds
        self.requests: dict[str, list[str]] = {"/fast": [], "/slow": [], "/flaky": []}
        self.flaky_until = float("inf")
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.requests[request.path].append(request.headers["Idempotency-Key"])
        if request.path == "/slow":
            await asyncio.sleep(self.slow_seconds)
        if request.path == "/flaky" and time.monotonic() < self.flaky_until:
            return web.Response(status=503)
        return web.Response(text="ok")

    async def start(self) -> web.AppRunner:
        app = web.Application()
        app.router.add_post("/{path:.*}", self.handle)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return runner


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


async def welcome_stream(pool, settings, count: int, tag: str) -> list[float]:
    """`count` members added one every 0.25 s; their welcome emails' latencies once all are handled."""
    ids = []
    for k in range(count):
        ids.append((await add_member(f"welcome.{tag}.{k}@example.com", welcome=True, settings=settings)).member_id)
        await asyncio.sleep(0.25)
    while await pool.fetchval("SELECT count(*) FROM outbox WHERE event_type = 'MemberCreatedEvent' "
                              "AND payload->>'member_id' = ANY($1::text[]) AND status = 'succeeded'", ids) < count:
        await asyncio.sleep(0.1)
    return [float(row["ms"]) for row in await pool.fetch(WELCOME_LATENCY, ids)]


async def burst(pool, members: int) -> None:
    """`members` members made and their member.added events written in one transaction."""
    async with pool.acquire() as conn, conn.transaction():
        ids = [row["id"] for row in await conn.fetch(
            "INSERT INTO members (email, name) SELECT 'burst.' || k || '@example.com', 'Reader ' || k "
            "FROM generate_series(1, $1) k RETURNING id", members)]
        await site_events.emit(conn, "member.added", ids)


async def delivered_times(pool, webhooks: dict[str, str], count: int, started: float) -> dict[str, float]:
    """Seconds from the burst's commit until each webhook's last entry is recorded."""
    done: dict[str, float] = {}
    while len(done) < len(webhooks):
        rows = await pool.fetch("SELECT webhook_id, count(*) AS n FROM outbox WHERE webhook_id IS NOT NULL "
                                "AND status IN ('succeeded', 'skipped', 'aborted') GROUP BY webhook_id")
        for row in rows:
            path = webhooks[row["webhook_id"]]
            if row["n"] >= count and path not in done:
                done[path] = time.monotonic() - started
                print(f"    {path:<6} all {count:,} recorded after {done[path]:,.1f} s", flush=True)
        await asyncio.sleep(0.5)
    return done


async def main(args: argparse.Namespace) -> None:
    targets = Targets(args.slow_seconds, args.flaky_seconds)
    runner = await targets.start()
    async with bench_servers(simulator=True) as servers:
        settings = load_settings(
            database_url=servers.database_url, mailgun_base_url=servers.simulator_url, mailgun_api_key=SIMULATOR_KEY,
            mailgun_domain=SIMULATOR_DOMAIN, members_link_secret="bench-link-secret", task_queue="bench",
            site_webhooks_allow_loopback=True, site_webhooks_in_flight=args.in_flight)
        pool = await database.connect(servers.database_url, max_size=10)
        await pool.execute(WELCOME)
        async with running_worker(servers.env.client, settings):
            await ensure_relay(servers.env.client, settings)
            print(f"site webhooks: {args.members:,} member.added to 3 webhooks (slow {args.slow_seconds:g} s, "
                  f"flaky 503 for {args.flaky_seconds:g} s), {args.in_flight} in flight per webhook", flush=True)
            alone = await welcome_stream(pool, settings, args.welcomes, "alone")
            print(f"  welcome emails, no webhooks:   p50 {percentile(alone, 0.5):,.0f} ms  "
                  f"p99 {percentile(alone, 0.99):,.0f} ms  max {max(alone):,.0f} ms", flush=True)

            integration = await pool.fetchval("INSERT INTO integrations (name, slug) VALUES ('Bench', 'bench') "
                                              "RETURNING id")
            webhooks = {}
            for path in targets.requests:
                hook = await create_webhook("member.added", f"http://127.0.0.1:{targets.port}{path}", integration,
                                            secret="bench-secret", settings=settings)
                webhooks[hook.id] = path
            targets.flaky_until = time.monotonic() + args.flaky_seconds
            started = time.monotonic()
            await burst(pool, args.members)
            print(f"  burst committed in {time.monotonic() - started:,.1f} s", flush=True)
            during = asyncio.create_task(welcome_stream(pool, settings, args.welcomes, "during"))
            # The welcomed members are members added too: their member.added go to the webhooks as well.
            times = await delivered_times(pool, webhooks, args.members + args.welcomes, started)
            beside = await during
            print(f"  welcome emails, during the burst: p50 {percentile(beside, 0.5):,.0f} ms  "
                  f"p99 {percentile(beside, 0.99):,.0f} ms  max {max(beside):,.0f} ms")
            # Where the time goes: from the relay's dispatch to the entry recorded, per webhook.
            for row in await pool.fetch(
                    "SELECT webhook_id, percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM "
                    "processed_at - dispatched_at)) AS p50, max(extract(epoch FROM processed_at - dispatched_at)) "
                    "AS top FROM outbox WHERE webhook_id IS NOT NULL GROUP BY webhook_id"):
                print(f"  {webhooks[row['webhook_id']]:<6} dispatch → recorded: p50 {row['p50']:,.2f} s  "
                      f"max {row['top']:,.2f} s")
            for path, keys in targets.requests.items():
                print(f"  {path:<6} {times[path]:8,.1f} s  received once after dedup: {len(set(keys)):,} of "
                      f"{args.members + args.welcomes:,}  on the wire: {len(keys):,}")
            await servers.env.client.get_workflow_handle("outbox-relay-bench").terminate()
        await pool.close()
    await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--in-flight", type=int, default=50, help="PRESSROOM_WEBHOOKS_IN_FLIGHT for the run")
    parser.add_argument("--slow-seconds", type=float, default=2.0)
    parser.add_argument("--flaky-seconds", type=float, default=60.0)
    parser.add_argument("--welcomes", type=int, default=40)
    tune_garbage_collection()
    asyncio.run(main(parser.parse_args()))

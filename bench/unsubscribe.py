"""The front door under a burst of one-click unsubscribes, beside the database's own cost.

`pressroom serve` runs as its own process against a fresh PostgreSQL. 10,000 distinct members,
each with a link made as the reference platform makes them, POST RFC 8058's one-click body with
`--concurrency` requests in flight: requests per second and the p50/p99 of each request. In the
same run, the same rows are subscribed again and removed by raw statements through asyncpg (one
DELETE per member at the same concurrency, then one set-based UPDATE of all of them): what the
database alone costs. Then the receiver's memory (RSS) with `--idle` idle connections open.

    .venv/bin/python bench/unsubscribe.py [--members 10000] [--concurrency 32] [--idle 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import socket

import aiohttp
import psutil

from bench.processes import stop_server
from devstack.servers import Postgres, free_port
from pressroom import database

SECRET = "bench-members-link-secret"
SEED = """
INSERT INTO newsletters (id, name, slug) VALUES ('nl1', 'Weekly', 'weekly');
INSERT INTO members (id, email) SELECT 'm' || n, 'member' || n || '@example.com' FROM generate_series(1, {members}) n;
INSERT INTO members_newsletters (member_id, newsletter_id) SELECT id, 'nl1' FROM members;
"""
SUBSCRIBE_AGAIN = "INSERT INTO members_newsletters (member_id, newsletter_id) SELECT id, 'nl1' FROM members"


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def report(name: str, latencies: list[float], seconds: float) -> None:
    print(f"  {name:<44} {len(latencies) / seconds:9,.0f} /s   p50 {statistics.median(latencies) * 1000:6.2f} ms"
          f"   p99 {percentile(latencies, 0.99) * 1000:6.2f} ms", flush=True)


async def bounded(items, work, concurrency: int) -> tuple[list[float], float]:
    """Run `work(item)` for each item, `concurrency` at a time: each one's latency, and the wall time."""
    queue = list(items)
    latencies: list[float] = []

    async def runner() -> None:
        while queue:
            item = queue.pop()
            began = time.perf_counter()
            await work(item)
            latencies.append(time.perf_counter() - began)

    began = time.perf_counter()
    await asyncio.gather(*(runner() for _ in range(concurrency)))
    return latencies, time.perf_counter() - began


def wait_for_port(port: int, process: subprocess.Popen, log: Path) -> None:

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"pressroom serve exited: {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("pressroom serve did not listen within 60 s")


async def main(members: int, concurrency: int, idle: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="pressroom-bench-unsubscribe-"))
    postgres = Postgres(folder / "postgres", free_port())
    postgres.start(durable=True)  # a leaving is committed to disk before it is answered
    server = None
    try:
        await database.migrate(postgres.url)
        pool = await database.connect(postgres.url, max_size=concurrency)
        for statement in SEED.format(members=members).strip().split(";\n"):
            await pool.execute(statement)
        rows = await pool.fetch("SELECT id, uuid::text AS uuid FROM members")
        newsletter = await pool.fetchval("SELECT uuid::text FROM newsletters WHERE id = 'nl1'")

        port = free_port()
        log = folder / "serve.log"
        env = {**os.environ, "DATABASE_URL": postgres.url, "PRESSROOM_MEMBERS_LINK_SECRET": SECRET,
               "MAILGUN_WEBHOOK_SIGNING_KEY": "bench-signing-key", "PRESSROOM_LOG_FORMAT": "text",
               "PRESSROOM_SERVE_MAX_CONNECTIONS": str(idle + 100), "PRESSROOM_SERVE_HEADER_TIMEOUT_SECONDS": "120"}
        with open(log, "ab") as out:  # the server writes to its own copy of the file
            server = subprocess.Popen([sys.executable, "-m", "starter", "serve", "--port", str(port)], cwd=ROOT,
                                      env=env, stdout=out, stderr=subprocess.STDOUT)
        wait_for_port(port, server, log)
        base = f"http://127.0.0.1:{port}/unsubscribe/"
        links = [f"{base}?" + urlencode({"uuid": r["uuid"], "newsletter": newsletter,
                                         "key": hmac.new(SECRET.encode(), r["uuid"].encode(),
                                                         hashlib.sha256).hexdigest()})
                 for r in rows]
        print(f"{members:,} members, {concurrency} requests in flight, PostgreSQL durable; pressroom serve pid "
              f"{server.pid}", flush=True)

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as http:
            async def one_click(url: str) -> None:
                async with http.post(url, data=b"List-Unsubscribe=One-Click",
                                     headers={"Content-Type": "application/x-www-form-urlencoded"}) as response:
                    await response.read()
                    assert response.status == 200, response.status

            await one_click(links[0])  # warm: a connection, the statements prepared
            cpu = psutil.Process(server.pid).cpu_times()
            latencies, seconds = await bounded(links[1:], one_click, concurrency)
            spent = psutil.Process(server.pid).cpu_times()
            report("one-click POST through pressroom serve", latencies, seconds)
            busy = (spent.user + spent.system - cpu.user - cpu.system)
            print(f"  the server's CPU: {busy / len(latencies) * 1000:.2f} ms per request "
                  f"({busy / seconds:.0%} of one core)", flush=True)
        left = await pool.fetchval("SELECT count(*) FROM members_subscribe_events WHERE source = 'link'")
        still = await pool.fetchval("SELECT count(*) FROM members_newsletters")
        print(f"  recorded {left:,} leavings, {still:,} subscriptions left", flush=True)

        await pool.execute(SUBSCRIBE_AGAIN)

        async def raw_delete(member_id: str) -> None:
            await pool.execute("DELETE FROM members_newsletters WHERE member_id = $1 AND newsletter_id = 'nl1'",
                               member_id)

        latencies, seconds = await bounded([r["id"] for r in rows], raw_delete, concurrency)
        report("raw DELETE per member (asyncpg, same rows)", latencies, seconds)
        await pool.execute(SUBSCRIBE_AGAIN)
        began = time.perf_counter()
        await pool.execute("UPDATE members_newsletters SET newsletter_id = newsletter_id WHERE newsletter_id = 'nl1'")
        print(f"  raw UPDATE of all {members:,} rows in one statement:  {(time.perf_counter() - began) * 1000:8.1f} ms",
              flush=True)
        await pool.close()

        process = psutil.Process(server.pid)
        before = process.memory_info().rss
        sockets = []
        for _ in range(idle):
            sockets.append(await asyncio.open_connection("127.0.0.1", port))
        deadline = time.monotonic() + 30
        while len(process.net_connections(kind="tcp")) < idle and time.monotonic() < deadline:
            await asyncio.sleep(0.1)  # until the server has accepted them all
        held = process.memory_info().rss
        print(f"receiver memory: {before / 2**20:,.1f} MiB, {held / 2**20:,.1f} MiB with {idle:,} idle connections "
              f"open ({(held - before) / idle / 1024:,.1f} KiB each)", flush=True)
        for _, writer in sockets:
            writer.close()
    finally:
        stop_server(server)
        postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--idle", type=int, default=1000)
    args = parser.parse_args()
    asyncio.run(main(args.members, args.concurrency, args.idle))

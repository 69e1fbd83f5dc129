"""The tracked links' redirects under load, beside the database's own cost, and killed mid-burst.

`pressroom serve` runs as its own process against a fresh, durable PostgreSQL holding one email's
`--links` redirects and `--members` members. Three runs, each request a GET of `/r/{id}?m={uuid}`
answered 302 once its click is committed, from a browser's user agent (a reader's):

1. steady: `--rate` clicks a second for `--steady-seconds`, sent on a fixed schedule (open loop):
   the rate answered and each answer's p50/p99;
2. burst: `--burst` clicks with `--concurrency` in flight: answers a second, p50/p99; beside it, in
   the same run, the same rows INSERTed raw through asyncpg (one statement and commit each, the
   same concurrency): what one commit per click would cost;
3. crash: `--crash` clicks, each of its own member, the server killed -9 once a third are
   answered: every click answered 302 must be stored exactly once (a click not answered may or
   may not be). The server is started again and the rest of the clicks are sent.

    .venv/bin/python bench/clicks.py [--members 100000] [--rate 500] [--steady-seconds 60]
                                     [--burst 100000] [--crash 20000] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp
import psutil

from bench.processes import stop_server
from bench.unsubscribe import bounded, report, wait_for_port
from devstack.link_followers import BROWSER
from devstack.servers import Postgres, free_port
from pressroom import database

SEED = """
INSERT INTO posts (id, title, slug) VALUES ('p1', 'Issue', 'issue');
INSERT INTO emails (id, post_id, subject) VALUES ('e1', 'p1', 'Issue');
INSERT INTO redirects (id, "from", "to", post_id)
SELECT md5('link' || n), '/r/' || md5('link' || n), 'https://example.com/story/' || n, 'p1'
FROM generate_series(1, {links}) n;
INSERT INTO members (id, email) SELECT 'm' || n, 'member' || n || '@example.com' FROM generate_series(1, {members}) n;
"""
COMMITS = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
RAW_INSERT = "INSERT INTO members_click_events (id, member_id, redirect_id, created_at) VALUES ($1, $2, $3, now())"


def start_server(port: int, env: dict, log: Path) -> subprocess.Popen:
    with open(log, "ab") as output:  # the child keeps its own copy of the descriptor
        server = subprocess.Popen([sys.executable, "-m", "starter", "serve", "--port", str(port)], cwd=ROOT,
                                  env=env, stdout=output, stderr=subprocess.STDOUT)
    wait_for_port(port, server, log)
    return server


async def steady(http: aiohttp.ClientSession, urls: list[str], rate: float, seconds: float) -> None:
    latencies: list[float] = []
    failed = 0

    async def one(url: str) -> None:
        nonlocal failed
        began = time.perf_counter()
        try:
            async with http.get(url, allow_redirects=False) as response:
                await response.read()
                if response.status != 302:
                    failed += 1
        except aiohttp.ClientError:
            failed += 1
        latencies.append(time.perf_counter() - began)

    total = int(rate * seconds)
    began = time.perf_counter()
    tasks = []
    for n in range(total):
        await asyncio.sleep(max(0.0, began + n / rate - time.perf_counter()))
        tasks.append(asyncio.create_task(one(urls[n % len(urls)])))
    await asyncio.gather(*tasks)
    report(f"steady {rate:,.0f}/s for {seconds:,.0f} s ({failed} not 302)", latencies, time.perf_counter() - began)


async def main(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="pressroom-bench-clicks-"))
    postgres = Postgres(folder / "postgres", free_port())
    postgres.start(durable=True)  # a click answered is a click on disk
    server = None
    try:
        await database.migrate(postgres.url)
        pool = await database.connect(postgres.url, max_size=args.concurrency)
        for statement in SEED.format(links=args.links, members=args.members).strip().split(";\n"):
            await pool.execute(statement)
        paths = [r["from"] for r in await pool.fetch('SELECT "from" FROM redirects ORDER BY id')]
        members = [(r["id"], r["uuid"]) for r in await pool.fetch("SELECT id, uuid::text AS uuid FROM members "
                                                                  "ORDER BY id")]
        port = free_port()
        log = folder / "serve.log"
        env = {**os.environ, "DATABASE_URL": postgres.url, "PRESSROOM_MEMBERS_LINK_SECRET": "bench-secret",
               "MAILGUN_WEBHOOK_SIGNING_KEY": "bench-signing-key",
               "PRESSROOM_SERVE_MAX_CONNECTIONS": str(args.concurrency * 4 + 100)}
        server = start_server(port, env, log)
        base = f"http://127.0.0.1:{port}"

        def url(n: int) -> str:
            return f"{base}{paths[n % len(paths)]}?m={members[n % len(members)][1]}"

        print(f"{args.links} links, {args.members:,} members, PostgreSQL durable, pressroom serve pid {server.pid}",
              flush=True)
        connector = aiohttp.TCPConnector(limit=args.concurrency * 4)
        async with aiohttp.ClientSession(connector=connector, headers={"User-Agent": BROWSER}) as http:
            async def click(n: int) -> None:
                async with http.get(url(n), allow_redirects=False) as response:
                    await response.read()
                    assert response.status == 302, response.status

            await click(0)  # warm: a connection, the target cached
            if args.steady_seconds:
                await steady(http, [url(n) for n in range(args.members)], args.rate, args.steady_seconds)
            cpu, own = psutil.Process(server.pid).cpu_times(), psutil.Process().cpu_times()
            commits = await pool.fetchval(COMMITS)
            latencies, seconds = await bounded(range(args.burst), click, args.concurrency)
            commits = await pool.fetchval(COMMITS) - commits
            spent, own_spent = psutil.Process(server.pid).cpu_times(), psutil.Process().cpu_times()
            report(f"burst of {args.burst:,} GET /r/ ({args.concurrency} in flight)", latencies, seconds)
            busy = spent.user + spent.system - cpu.user - cpu.system
            readers = own_spent.user + own_spent.system - own.user - own.system
            print(f"  the server's CPU: {busy / len(latencies) * 1000:.2f} ms per click "
                  f"({busy / seconds:.0%} of one core); the readers' (this process): "
                  f"{readers / len(latencies) * 1000:.2f} ms per click; {commits:,} commits in the database "
                  f"({len(latencies) / max(commits, 1):.1f} clicks each)", flush=True)

        redirect_ids = [r["id"] for r in await pool.fetch("SELECT id FROM redirects ORDER BY id")]

        async def raw(n: int) -> None:
            await pool.execute(RAW_INSERT, secrets.token_hex(12), members[n % len(members)][0],
                               redirect_ids[n % len(redirect_ids)])

        own = psutil.Process().cpu_times()
        latencies, seconds = await bounded(range(args.burst), raw, args.concurrency)
        own_spent = psutil.Process().cpu_times()
        report("raw INSERT per click (asyncpg, same rows)", latencies, seconds)
        inserting = own_spent.user + own_spent.system - own.user - own.system
        print(f"  this process's CPU: {inserting / len(latencies) * 1000:.2f} ms per INSERT", flush=True)

        if args.crash:
            await crash(args, pool, server, port, env, log, paths, members)
            server = None
        await pool.close()
    finally:
        stop_server(server)
        postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)


async def crash(args, pool, server, port: int, env: dict, log: Path, paths: list[str],
                members: list[tuple[str, str]]) -> None:
    """Each click of its own member on one link, so that a stored click names its request."""
    count = min(args.crash, len(members))
    await pool.execute("TRUNCATE members_click_events CASCADE")
    path = paths[0]
    base = f"http://127.0.0.1:{port}"
    answered: set[str] = set()
    a_third = asyncio.Event()
    refused = 0

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=args.concurrency * 4),
                                     headers={"User-Agent": BROWSER}) as http:
        async def click(n: int) -> None:
            nonlocal refused
            member_id, member_uuid = members[n]
            try:
                async with http.get(f"{base}{path}?m={member_uuid}", allow_redirects=False) as response:
                    await response.read()
                    if response.status == 302:
                        answered.add(member_id)
                        if len(answered) >= count // 3:
                            a_third.set()
            except (TimeoutError, aiohttp.ClientError):
                refused += 1

        async def kill_when_a_third_answered() -> None:
            await a_third.wait()
            os.kill(server.pid, signal.SIGKILL)

        killer = asyncio.create_task(kill_when_a_third_answered())
        began = time.perf_counter()
        await bounded(range(count), click, args.concurrency)
        await killer
        server.wait()
        print(f"crash: killed -9 after {len(answered):,} of {count:,} clicks answered "
              f"({time.perf_counter() - began:.1f} s); {refused:,} requests found no server", flush=True)

    stored = {r["member_id"]: r["n"] for r in await pool.fetch(
        "SELECT member_id, count(*) AS n FROM members_click_events GROUP BY member_id")}
    lost = [m for m in answered if stored.get(m, 0) != 1]
    twice = [m for m, n in stored.items() if n > 1]
    unanswered_stored = len(set(stored) - answered)
    print(f"  answered 302 and stored exactly once: {len(answered) - len(lost):,} of {len(answered):,}; "
          f"lost {len(lost)}, stored twice {len(twice)}; stored but never answered (the kill came between the "
          f"commit and the answer): {unanswered_stored}", flush=True)
    server = start_server(port, env, log)
    try:
        settled = await pool.fetchval("SELECT count(*) FROM members_click_events_unsettled")
        print(f"  started again: {settled:,} readers' clicks waiting to settle (the next server settles them)",
              flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--links", type=int, default=20)
    parser.add_argument("--rate", type=float, default=500)
    parser.add_argument("--steady-seconds", type=float, default=60)
    parser.add_argument("--burst", type=int, default=100_000)
    parser.add_argument("--crash", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    asyncio.run(main(parser.parse_args()))

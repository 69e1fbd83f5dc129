"""Benchmark: Mailgun's webhooks from push to statistics, and what a crash costs (not a test).

Starts its own PostgreSQL, Temporal dev server, simulator, webhook receiver (`pressroom webhooks
serve`) and worker (`pressroom worker`), each its own process, registers the receiver with the
simulator (`webhooks setup`), seeds one email with `--members` recipients, then:

  1. steady: `--rate` delivered events a second for `--steady-seconds`, pushed by the simulator as
     they happen; push-to-effect p50/p99 (from the request that was answered 200 to the moment the
     email's delivered_count counts it: recipient row and aggregate both done), and event-to-effect
     (from when the event happened: the sender's queue too, when the receiver is slower than the rate);
  2. burst: `--burst` events at once (a newsletter's deliveries); the same latencies, the receiver's
     accepted events per second and CPU per event (`--profile FILE`: py-spy on the receiver), and
     the raw figures beside them, each with its CPU and the receiver's ratio to it: the same rows (a
     token and a real event's text each) INSERTed by a plain program one request at a time (token
     and event in one statement and commit, from as many connections as the simulator pushes with:
     the goal's baseline), in the group commit's groups (the database's ceiling), and the old
     figure (the inbox row alone);
  3. crash: `--crash` events at once while the receiver, then the worker, then PostgreSQL are
     killed with SIGKILL and started again, the simulator retrying as Mailgun does
     (time-compressed): every event applied exactly once, and the figures of what it took.

    .venv/bin/python bench/webhooks.py --members 100000 --rate 1000 --steady-seconds 60 --burst 100000 --crash 100000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collections import Counter

import asyncpg
import httpx
from temporalio.testing import WorkflowEnvironment

from bench.processes import cpu_seconds_by_family
from devstack.servers import Postgres, find_binary, free_port, start_simulator, stop_process, wait_for_port
from frontdoor.group_commit import COMMITS_IN_FLIGHT, GROUP_LIMIT
from pressroom import database
from pressroom.temporal import SEARCH_ATTRIBUTES, data_converter

ROOT = Path(__file__).resolve().parent.parent
KEY, DOMAIN, SIGNING_KEY = "key-bench-00000000", "mg.bench.example", "bench-webhook-signing-key"
PUSHERS = 32  # the simulator's concurrent pushes, and the raw INSERT's connections


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


class Bench:
    def __init__(self, folder: Path, members: int) -> None:
        self.folder, self.members = folder, members
        self.postgres = Postgres(folder / "data", free_port())
        self.sim_port, self.receiver_port = free_port(), free_port()
        self.sim = self.env = self.receiver = self.worker = None
        self.http = httpx.AsyncClient(timeout=60)

    @property
    def sim_url(self) -> str:
        return f"http://127.0.0.1:{self.sim_port}"

    def cli_env(self) -> dict[str, str]:
        return {**os.environ, "DATABASE_URL": self.postgres.url,
                "TEMPORAL_ADDRESS": self.env.client.service_client.config.target_host,
                "MAILGUN_BASE_URL": self.sim_url, "MAILGUN_API_KEY": KEY, "MAILGUN_DOMAIN": DOMAIN,
                "MAILGUN_WEBHOOK_SIGNING_KEY": SIGNING_KEY,
                "PRESSROOM_MEMBERS_LINK_SECRET": "bench-link-secret", "PRESSROOM_TASK_QUEUE": "bench-webhooks",
                "PRESSROOM_ANALYTICS_INTERVAL_SECONDS": "86400", "PRESSROOM_LOG_FORMAT": "text"}

    def spawn(self, *args: str, log: str) -> subprocess.Popen:
        with open(self.folder / log, "ab") as out:  # the process writes to its own copy of the file
            return subprocess.Popen([sys.executable, "-m", "starter", *args], cwd=ROOT, env=self.cli_env(),
                                    stdout=out, stderr=subprocess.STDOUT)

    def start_receiver(self) -> None:
        self.receiver = self.spawn("webhooks", "serve", "--port", str(self.receiver_port), log="receiver.log")
        wait_for_port(self.receiver_port, "the webhook receiver", self.receiver, self.folder / "receiver.log")

    def start_worker(self) -> None:
        self.worker = self.spawn("worker", log="worker.log")

    async def start(self) -> None:
        # Durable: a commit is on disk before the receiver answers 200 (the development default,
        # durable=False, turns that off and a kill -9 of PostgreSQL loses the last commits).
        self.postgres.start(durable=True)
        await database.migrate(self.postgres.url)
        self.sim = start_simulator(port=self.sim_port, api_key=KEY, domain=DOMAIN, log=self.folder / "simulator.log",
                                   webhook_signing_key=SIGNING_KEY)
        self.env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=find_binary("temporal"), data_converter=data_converter(),
            search_attributes=SEARCH_ATTRIBUTES, dev_server_extra_args=["--log-level", "error"])
        await self.seed()
        self.start_receiver()
        self.start_worker()
        setup = subprocess.run([sys.executable, "-m", "starter", "webhooks", "setup", "--url",
                                f"http://127.0.0.1:{self.receiver_port}/webhooks/mailgun"], cwd=ROOT,
                               env=self.cli_env(), capture_output=True, text=True, check=True)
        print(f"webhooks setup: {' '.join(setup.stdout.split())}")
        await self.sim_post("/_sim/push", {"record_sends": True, "concurrency": PUSHERS, "retry_scale": 0.002})

    async def stop(self) -> None:
        for process in (self.receiver, self.worker):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
        if self.env is not None:
            await self.env.shutdown()
        if self.sim is not None:
            stop_process(self.sim.pid)
        self.postgres.stop()
        await self.http.aclose()

    async def seed(self) -> None:
        conn = await database.connect_once(self.postgres.url)
        try:
            await conn.execute("INSERT INTO newsletters (id, name, slug) VALUES ('nl1', 'Weekly', 'weekly')")
            await conn.execute("INSERT INTO members (id, email) SELECT 'm' || n, 'member' || n || '@example.com' "
                               "FROM generate_series(0, $1 - 1) n", self.members)
            for email_id in ("steady", "burst", "crash"):
                await conn.execute("INSERT INTO posts (id, title, slug) VALUES ($1, $1, $1)", email_id)
                await conn.execute("INSERT INTO emails (id, post_id, newsletter_id, subject, status) "
                                   "VALUES ($1, $1, 'nl1', 'Issue', 'submitted')", email_id)
                await conn.execute("INSERT INTO email_batches (id, email_id) VALUES ($1, $1)", email_id)
                await conn.execute(
                    "INSERT INTO email_recipients (email_id, member_id, batch_id, member_uuid, member_email) "
                    "SELECT $1, m.id, $1, m.uuid, m.email FROM members m", email_id)
        finally:
            await conn.close()

    async def sim_post(self, path: str, body: dict) -> dict:
        response = await self.http.post(self.sim_url + path, json=body)
        response.raise_for_status()
        return response.json()

    async def push_stats(self) -> dict:
        return (await self.http.get(self.sim_url + "/_sim/push")).json()

    async def delivered(self, email_id: str) -> tuple[int, int]:
        """(recipients delivered, the email's delivered_count): rows applied, and aggregates recounted."""
        conn = await database.connect_once(self.postgres.url)
        try:
            row = await conn.fetchrow("SELECT (SELECT count(delivered_at) FROM email_recipients WHERE email_id = $1) "
                                      "AS rows, delivered_count FROM emails WHERE id = $1", email_id)
            return row["rows"], row["delivered_count"]
        finally:
            await conn.close()

    async def follow(self, email_id: str, count: int, timeout: float) -> list[tuple[float, int]]:
        """(time, delivered_count) every 50 ms until it reaches `count`."""
        conn = await database.connect_once(self.postgres.url)
        seen: list[tuple[float, int]] = []
        deadline = time.time() + timeout
        try:
            while time.time() < deadline:
                value = await conn.fetchval("SELECT delivered_count FROM emails WHERE id = $1", email_id)
                seen.append((time.time(), value))
                if value >= count:
                    break
                await asyncio.sleep(0.05)
        finally:
            await conn.close()
        return seen

    async def latencies(self, seen: list[tuple[float, int]], skip: int) -> list[float]:
        """Per event answered 200 (in send order, after the first `skip`): send → counted in delivered_count."""
        sent = (await self.http.get(self.sim_url + "/_sim/push/sent")).json()[skip:]
        out, index = [], 0
        for rank, at in enumerate(sent, start=1):
            while index < len(seen) and seen[index][1] < rank:
                index += 1
            if index == len(seen):
                break
            out.append(seen[index][0] - at)
        return out


def report(name: str, values: list[float]) -> None:
    print(f"{name}: push-to-effect p50 {percentile(values, 0.5) * 1000:,.0f} ms, "
          f"p99 {percentile(values, 0.99) * 1000:,.0f} ms, max {max(values) * 1000:,.0f} ms ({len(values):,} events)")


async def steady(bench: Bench, rate: int, seconds: int) -> None:
    count = rate * seconds
    before = len((await bench.http.get(bench.sim_url + "/_sim/push/sent")).json())
    start = time.time() + 2
    # Events spread at `rate` a second, in chunks of a tenth of a second: pushed as they happen.
    chunk = max(1, rate // 10)
    await bench.sim_post("/_sim/events", {"email_id": "steady", "count": count, "events": ["delivered"],
                                          "timestamp": start - 1.0, "spread_seconds": seconds, "chunk": chunk})
    seen = await bench.follow("steady", count, timeout=seconds + 300)
    report(f"steady {rate:,}/s for {seconds} s", await bench.latencies(seen, before))
    sent = (await bench.http.get(bench.sim_url + "/_sim/push/sent")).json()[before:]
    print(f"steady: pushes answered 200 at {len(sent) / max(1e-9, sent[-1] - sent[0]):,.0f}/s on average "
          f"(asked {rate:,}/s); the last {sent[-1] - (start - 1.0 + seconds):+,.1f} s after its due time")
    # From when each event happened (its chunk's time, the k-th counted taken as the k-th to happen):
    # what a receiver slower than the rate adds, as the sender's queue grows.
    step = seconds / max(1, -(-count // chunk))
    happened, previous = [], 0
    for at, counted in seen:
        happened += [at - (start - 1.0 + (k // chunk) * step) for k in range(previous, counted)]
        previous = max(previous, counted)
    print(f"steady: event-to-effect p50 {percentile(happened, 0.5):,.1f} s, p99 {percentile(happened, 0.99):,.1f} s")


async def burst(bench: Bench, count: int, profile: Path | None = None) -> None:
    before = len((await bench.http.get(bench.sim_url + "/_sim/push/sent")).json())
    began = time.time()
    cpu_before = cpu_seconds_by_family()
    processes = {"receiver": bench.receiver.pid, "worker": bench.worker.pid, "simulator": bench.sim.pid}
    process_before = {name: sum(cpu_seconds_by_family(pid).values()) for name, pid in processes.items()}
    receiver_before = user_kernel_seconds(bench.receiver.pid)
    profiler = start_profiler(bench, profile) if profile else None
    await bench.sim_post("/_sim/events", {"email_id": "burst", "count": count, "events": ["delivered"],
                                          "timestamp": time.time() - 1.0})
    seen = await bench.follow("burst", count, timeout=1800)
    if profiler is not None:
        profiler.send_signal(signal.SIGINT)
        profiler.wait(60)
    sent = (await bench.http.get(bench.sim_url + "/_sim/push/sent")).json()[before:]
    accepted_seconds = sent[-1] - began
    report(f"burst of {count:,}", await bench.latencies(seen, before))
    # The same events from when they all happened (the burst's start): what the sender's queue adds.
    happened, previous = [], 0
    for at, counted in seen:
        happened += [at - began] * max(0, counted - previous)
        previous = max(previous, counted)
    print(f"burst of {count:,}: event-to-effect (all happened at once; the sender pushes {PUSHERS} at a time) "
          f"p50 {percentile(happened, 0.5):,.1f} s, p99 {percentile(happened, 0.99):,.1f} s")
    print(f"burst: all {count:,} counted {seen[-1][0] - began:,.1f} s after the burst; receiver accepted "
          f"{count / accepted_seconds:,.0f} events/s ({accepted_seconds:,.1f} s to answer every push 200)")
    cpu = cpu_seconds_by_family() - cpu_before
    print("burst CPU seconds: " + ", ".join(f"{name} {value:,.1f}" for name, value in cpu.most_common(6)))
    print("  of which: " + ", ".join(f"{name} {sum(cpu_seconds_by_family(pid).values()) - process_before[name]:,.1f}"
                                     for name, pid in processes.items()))
    user, kernel = (after - before for after, before in zip(user_kernel_seconds(bench.receiver.pid), receiver_before,
                                                            strict=True))
    print(f"  the receiver: {(user + kernel) / count * 1e6:,.0f} µs of CPU an event (user {user:,.1f} s, "
          f"kernel {kernel:,.1f} s)")
    if profiler is not None:
        print_profile(profile)
    await raw_inserts(bench, count, count / accepted_seconds)


def user_kernel_seconds(pid: int) -> tuple[float, float]:
    """The CPU seconds a process spent in its own code and in the kernel's (sockets, for a server)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def start_profiler(bench: Bench, path: Path) -> subprocess.Popen:
    """py-spy sampling the receiver (its CPU only, without pausing it) until sent SIGINT."""
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        raise SystemExit("--profile needs py-spy (.venv/bin/pip install py-spy)")
    return subprocess.Popen([spy, "record", "--pid", str(bench.receiver.pid), "--rate", "250", "--nonblocking",
                             "--format", "raw", "--output", str(path)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def print_profile(path: Path, top: int = 14) -> None:
    """The receiver's profile: the functions holding most samples, on the stack (inclusive) and on top."""

    inclusive, own, total = Counter(), Counter(), 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = [frame.split(" (")[0] + " " + frame.rsplit("/", 1)[-1].split(":")[0] for frame in stack.split(";")]
        total += int(n)
        own[frames[-1]] += int(n)
        for frame in set(frames):
            inclusive[frame] += int(n)
    print(f"receiver profile ({total:,} samples while it ran or waited for a core, {path}):")
    print("  on the stack: " + ", ".join(f"{name} {n / total:.0%}" for name, n in inclusive.most_common(60)
                                         if n / total < 0.9)[:1500])
    print("  on top: " + ", ".join(f"{name} {n / total:.0%}" for name, n in own.most_common(top)))


# The raw program's tables: the inbox's and the tokens' columns, keys and indexes, where the worker
# does not look (it would apply the raw rows while they are timed).
_RAW_TABLES = """
CREATE TABLE bench_raw_inbox (LIKE webhook_inbox INCLUDING ALL);
CREATE TABLE bench_raw_tokens (LIKE webhook_tokens INCLUDING ALL)"""
# A plain receiver, one request at a time: the token (a replay stores nothing) and the event in one
# statement and one commit: the fewest round trips a request can take.
_RAW_ONE = """
WITH token AS (INSERT INTO bench_raw_tokens (provider, token, expires_at) VALUES ('raw', $1, now() + interval '1 day')
               ON CONFLICT DO NOTHING RETURNING token)
INSERT INTO bench_raw_inbox (provider, kind, event) SELECT 'raw', 'delivered', $2 FROM token"""
_RAW_GROUP = """
WITH item AS (SELECT * FROM unnest($1::text[], $2::text[]) AS t(token, event)),
token AS (INSERT INTO bench_raw_tokens (provider, token, expires_at) SELECT 'raw', token, now() + interval '1 day'
          FROM item ON CONFLICT DO NOTHING RETURNING token)
INSERT INTO bench_raw_inbox (provider, kind, event)
  SELECT 'raw', 'delivered', item.event FROM item JOIN token USING (token)"""


async def sample_events(bench: Bench, email_id: str) -> list[str]:
    """Up to 300 of the email's events as the receiver stores them (the simulator renders a push's
    `event-data` as its events API's item): the raw rows are the same rows."""
    response = await bench.http.get(f"{bench.sim_url}/v3/{DOMAIN}/events", auth=("api", KEY),
                                    params={"event": "delivered", "limit": 300})
    response.raise_for_status()
    items = [json.dumps(item, ensure_ascii=True) for item in response.json()["items"]]
    return items or [json.dumps({"id": "x" * 22, "event": "delivered"})]


async def raw_inserts(bench: Bench, count: int, accepted_per_second: float) -> None:
    """The same rows (a token and the event's JSON text each) INSERTed by a plain program: one
    request at a time from PUSHERS connections (the goal's baseline); in the group commit's groups
    (the set-based ceiling); and the old figure, the inbox row alone, kept for the history."""

    events = await sample_events(bench, "burst")
    rows = [(secrets.token_hex(25), events[n % len(events)]) for n in range(count)]
    pool = await database.connect(bench.postgres.url, max_size=PUSHERS)
    figures = {}

    async def timed(name: str, connections: int, step: int, work) -> None:
        await pool.execute("DROP TABLE IF EXISTS bench_raw_inbox, bench_raw_tokens" + ";" + _RAW_TABLES)
        next_item = iter(range(0, count, step))

        async def one_connection() -> None:
            async with pool.acquire() as conn:
                for n in next_item:
                    await work(conn, n)

        cpu_before = cpu_seconds_by_family()
        began = time.monotonic()
        await asyncio.gather(*(one_connection() for _ in range(connections)))
        figures[name] = seconds = time.monotonic() - began
        cpu = cpu_seconds_by_family() - cpu_before
        stored = await pool.fetchval("SELECT count(*) FROM bench_raw_inbox")
        print(f"  raw {name}: {count / seconds:,.0f} rows/s ({seconds:,.1f} s, {stored:,} stored; CPU: PostgreSQL "
              f"{cpu['postgres']:,.1f} s, Python {cpu['python']:,.1f} s)")

    async def one_each(conn, n):
        await conn.execute(_RAW_ONE, *rows[n])

    async def grouped(conn, n):
        group = rows[n:n + GROUP_LIMIT]
        await conn.execute(_RAW_GROUP, [t for t, _ in group], [e for _, e in group])

    async def inbox_only(conn, n):
        await conn.execute("INSERT INTO bench_raw_inbox (provider, kind, event) VALUES ('raw', 'delivered', $1)",
                           rows[n][1])

    print(f"raw INSERT of the same {count:,} rows (a token and the event each, {len(events)} real events' texts):")
    await timed(f"one request at a time, token + event in one statement and commit, {PUSHERS} connections",
                PUSHERS, 1, one_each)
    await timed(f"in groups of {GROUP_LIMIT} (unnest), {COMMITS_IN_FLIGHT} connections", COMMITS_IN_FLIGHT, GROUP_LIMIT,
                grouped)
    await timed(f"the old figure: the inbox row alone, one statement each, {PUSHERS} connections", PUSHERS, 1,
                inbox_only)
    await pool.execute("DROP TABLE bench_raw_inbox, bench_raw_tokens")
    await pool.close()
    names = list(figures)
    print(f"receiver / raw one request at a time: {accepted_per_second / (count / figures[names[0]]):.2f}x "
          f"(goal >= 0.7x); / raw in groups: {accepted_per_second / (count / figures[names[1]]):.2f}x; "
          f"/ the old raw figure: {accepted_per_second / (count / figures[names[2]]):.2f}x")


async def crash(bench: Bench, count: int) -> None:
    """kill -9 of the receiver, the worker and PostgreSQL during a burst; everything applied once."""
    stats_before = await bench.push_stats()
    began = time.time()
    await bench.sim_post("/_sim/events", {"email_id": "crash", "count": count, "events": ["delivered"],
                                          "timestamp": time.time() - 1.0})

    async def wait_for_share(share: float) -> None:
        while (await bench.push_stats()).get("answered_200", 0) - stats_before.get("answered_200", 0) < share * count:
            await asyncio.sleep(0.05)

    await wait_for_share(0.2)
    bench.receiver.kill()
    bench.receiver.wait()
    print(f"crash: receiver killed at {time.time() - began:,.1f} s")
    await asyncio.sleep(1.0)
    bench.start_receiver()
    await wait_for_share(0.4)
    bench.worker.kill()
    bench.worker.wait()
    print(f"crash: worker killed at {time.time() - began:,.1f} s")
    await asyncio.sleep(1.0)
    bench.start_worker()
    await wait_for_share(0.6)
    os.kill(bench.postgres.process.pid, signal.SIGKILL)
    bench.postgres.process.wait()
    print(f"crash: PostgreSQL killed at {time.time() - began:,.1f} s")
    await asyncio.sleep(1.0)
    bench.postgres.start(durable=True)

    deadline = time.time() + 600 + count / 50  # a large burst takes minutes to push
    while time.time() < deadline:
        # As a supervisor would: a process that exited (a worker starting while PostgreSQL restarts
        # gives up at once) is started again.
        for name, process, start in (("worker", bench.worker, bench.start_worker),
                                     ("receiver", bench.receiver, bench.start_receiver)):
            if process.poll() is not None:
                print(f"crash: the {name} exited ({process.returncode}); started again at {time.time() - began:,.1f} s")
                start()
        try:
            rows, counted = await bench.delivered("crash")
        except (OSError, asyncpg.PostgresError):
            await asyncio.sleep(0.5)  # PostgreSQL still starting
            continue
        stats = await bench.push_stats()
        if rows == count and counted == count and stats["pending"] == 0:
            break
        await asyncio.sleep(0.5)
    conn = await database.connect_once(bench.postgres.url)
    try:
        inbox = await conn.fetchval("SELECT count(*) FROM webhook_inbox")
        tokens = await conn.fetchval("SELECT count(*) FROM webhook_tokens")
        refused = {r["reason"]: r["count"] for r in await conn.fetch("SELECT reason, count FROM webhook_refusals")}
    finally:
        await conn.close()
    stats = await bench.push_stats()
    delta = {k: stats.get(k, 0) - stats_before.get(k, 0) for k in stats if isinstance(stats.get(k), int)}
    print(f"crash: {count:,} events; recipients delivered {rows:,}, email delivered_count {counted:,}, "
          f"inbox left {inbox}, {time.time() - began:,.1f} s to converge")
    print(f"crash: pushes {delta.get('pushed', 0):,}, answered 200 {delta.get('answered_200', 0):,}, "
          f"503 {delta.get('answered_503', 0):,}, no answer {delta.get('errors', 0):,}, "
          f"retries {delta.get('retries', 0):,}, "
          f"gave up {delta.get('gave_up', 0):,}; tokens stored (all phases) {tokens:,}; refusals {refused}")
    print("crash: every event applied exactly once" if rows == count == counted and delta.get("gave_up", 0) == 0
          else "crash: NOT every event was applied")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--steady-seconds", type=int, default=30)
    parser.add_argument("--burst", type=int, default=100_000)
    parser.add_argument("--crash", type=int, default=20_000)
    parser.add_argument("--profile", type=Path, help="record the receiver with py-spy during the burst (raw "
                                                     "stacks into this file) and print where its CPU went")
    args = parser.parse_args()
    if max(args.rate * args.steady_seconds, args.burst, args.crash) > args.members:
        parser.error("--members must cover the largest phase")
    folder = Path(tempfile.mkdtemp(prefix="pressroom-bench-webhooks-"))
    folder.chmod(0o755)
    bench = Bench(folder, args.members)
    try:
        await bench.start()
        print(f"{args.members:,} recipients per email; machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
        if args.rate and args.steady_seconds:
            await steady(bench, args.rate, args.steady_seconds)
        if args.burst:
            await burst(bench, args.burst, args.profile)
        if args.crash:
            await crash(bench, args.crash)
    finally:
        await bench.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())

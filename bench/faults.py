"""Fault matrix: does every member get each email exactly once, whatever the provider does? (not a test)

Starts a stack of its own on free ports (PostgreSQL, a Temporal dev server, the Mailgun simulator
as its own process) and runs each row with a fresh email and a worker process of its own:

    the same send without faults (the time the others compare with)
  + {500+429, lost answers, kill -9 of the worker mid-send}
  × {simulator faithful, provider assigns its own ids, events stored 45 s late}
  + lost answers with no retries, then `newsletter send` again
  + welcome emails whose answers are lost, with no retries, then `outbox requeue`

and prints, per row, eligible / received / missing / duplicates / final status / seconds, counted
from what the simulator accepted. Every row should read 0 missing, 0 duplicates, submitted
(succeeded for the welcome emails). The confirm window is scaled to the simulator's lag (60 s
against 45 s late events) instead of Mailgun's 30 minutes, so that the matrix runs in minutes.

    .venv/bin/python bench/faults.py --members 3000
    .venv/bin/python bench/faults_ses.py --members 500   (the same matrix through SES)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx

from bench.servers import SIMULATOR_DOMAIN, SIMULATOR_KEY, BenchServers, bench_servers
from operations.members import add_member
from operations.newsletter import follow_newsletter, start_newsletter
from operations.outbox import requeue_outbox_entry
from pressroom import database
from pressroom.settings import Settings, load_settings

LATE_SECONDS = 45
CONFIRM_WINDOW_SECONDS = 60  # longer than the simulator's lag, as Mailgun's 30 minutes is longer than its own
ADVERSARIES = {
    "faithful": {},
    "provider ids": {"assign_own_ids": True},
    "events 45 s late": {"storage_delay_seconds": LATE_SECONDS},
    "own ids + 45 s late": {"assign_own_ids": True, "storage_delay_seconds": LATE_SECONDS},
}
# 500s both before and after storing the message (Mailgun: a 5xx may still have sent), and 429s.
ERRORS = {"error_rate": 0.1, "error_after_accept_rate": 0.1, "rate_limit_rate": 0.1, "retry_after_seconds": 1}
LOST = {"lost_response_rate": 0.2}
KILL = {"latency_ms": 300}

SEED = """
INSERT INTO newsletters (id, name, slug, sender_email, subscribe_on_signup)
VALUES ('nl-{tag}', 'Weekly', 'weekly-{tag}', 'news@example.com', false);
INSERT INTO members (id, email, name, created_at)
SELECT '{tag}-' || n, 'member' || n || '-{tag}@example.com', 'Member ' || n, now() - interval '1 hour'
FROM generate_series(1, {members}) n;
INSERT INTO members_newsletters (member_id, newsletter_id) SELECT id, 'nl-{tag}' FROM members WHERE id LIKE '{tag}-%';
INSERT INTO posts (id, title, slug, html, newsletter_id, status, published_at)
VALUES ('p-{tag}', 'Issue', 'issue-{tag}', '<p>Hi</p>', 'nl-{tag}', 'published', now());
INSERT INTO emails (id, post_id, newsletter_id, subject, html, plaintext)
VALUES ('e-{tag}', 'p-{tag}', 'nl-{tag}', 'Issue', '<p>Hello %recipient.name%</p>', 'Hello');
"""


@dataclass
class Row:
    case: str
    adversary: str
    eligible: int
    received: int
    missing: int
    duplicates: int
    status: str
    seconds: float


class Matrix:
    """The rows through Mailgun's simulator; bench/faults_ses.py's SesMatrix changes only how the
    provider is set up, faulted and counted."""

    QUEUE = "faults"  # each row's task queue: this and the row's number
    LOST_ANSWERS = LOST  # the faults of "lost, no retries": the first send must fail

    def __init__(self, servers: BenchServers, members: int) -> None:
        self.servers = servers
        self.members = members
        self.sim = httpx.Client(base_url=servers.simulator_url, timeout=60)
        self.rows = 0

    def settings(self, queue: str) -> Settings:
        return load_settings(database_url=self.servers.database_url, mailgun_base_url=self.servers.simulator_url,
                             mailgun_api_key=SIMULATOR_KEY, mailgun_domain=SIMULATOR_DOMAIN, task_queue=queue,
                             members_link_secret="bench-link-secret")

    def worker(self, queue: str, **extra: str) -> subprocess.Popen:
        env = {**os.environ, "DATABASE_URL": self.servers.database_url,
               "TEMPORAL_ADDRESS": self.servers.env.client.service_client.config.target_host,
               "PRESSROOM_TASK_QUEUE": queue, "MAILGUN_BASE_URL": self.servers.simulator_url,
               "MAILGUN_API_KEY": SIMULATOR_KEY, "MAILGUN_DOMAIN": SIMULATOR_DOMAIN,
               "PRESSROOM_MEMBERS_LINK_SECRET": "bench-link-secret",
               "PRESSROOM_BATCH_SIZE": "100", "PRESSROOM_SEND_CONCURRENCY": "4",
               "PRESSROOM_PROVIDER_RETRY_SECONDS": "1",
               "PRESSROOM_SEND_CONFIRM_WINDOW_SECONDS": str(CONFIRM_WINDOW_SECONDS),
               "PRESSROOM_SEND_CONFIRM_POLL_SECONDS": "5",
               "PRESSROOM_OUTBOX_BACKOFF_SECONDS": "1", "PRESSROOM_OUTBOX_POLL_INTERVAL_SECONDS": "0.2", **extra}
        return subprocess.Popen([sys.executable, "-m", "worker"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    @staticmethod
    def stop(process: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
        process.send_signal(sig)
        process.wait()

    def faults(self, adversary: str, **faults) -> None:
        """Exactly these faults (the simulator merges what it is sent, so the others are switched off)."""
        off = {name: 0 for name in ("error_rate", "error_after_accept_rate", "rate_limit_rate", "lost_response_rate",
                                    "latency_ms", "storage_delay_seconds")}
        response = self.sim.post("/_sim/faults", json={**off, "assign_own_ids": False, **faults,
                                                       **ADVERSARIES[adversary], "seed": self.rows})
        response.raise_for_status()

    def reset(self) -> None:
        self.sim.post("/_sim/reset").raise_for_status()

    def delivered(self, email_id: str) -> Counter:
        """The copies the provider accepted for the email, by address."""
        messages = self.sim.get("/_sim/messages", params={"email_id": email_id}).json()
        return Counter(r["address"] for m in messages for r in m["recipients"])

    async def fresh_email(self, pool) -> str:
        self.rows += 1
        tag = f"r{self.rows}"
        self.reset()
        await pool.execute(SEED.format(tag=tag, members=self.members))
        return f"e-{tag}"

    async def count(self, pool, case: str, adversary: str, email_id: str, started: float) -> Row:
        seconds = time.perf_counter() - started
        eligible = {r["email"] for r in await pool.fetch(
            "SELECT m.email FROM members m JOIN members_newsletters mn ON mn.member_id = m.id "
            "JOIN emails e ON e.newsletter_id = mn.newsletter_id WHERE e.id = $1", email_id)}
        counts = self.delivered(email_id)
        status = await pool.fetchval("SELECT status FROM emails WHERE id = $1", email_id)
        return Row(case, adversary, len(eligible), len(eligible & set(counts)), len(eligible - set(counts)),
                   sum(n - 1 for n in counts.values()), status, seconds)

    async def send(self, pool, case: str, adversary: str, faults: dict, *, kill: bool = False) -> Row:
        email_id = await self.fresh_email(pool)
        queue = f"{self.QUEUE}-{self.rows}"
        settings = self.settings(queue)
        self.faults(adversary, **faults)
        worker = self.worker(queue)
        started = time.perf_counter()
        try:
            start = await start_newsletter(email_id, client=self.servers.env.client, settings=settings)
            if kill:
                await until(pool, "SELECT bool_or(status = 'submitted') AND bool_or(status = 'submitting' "
                                  "AND send_outcome = 'uncertain') FROM email_batches WHERE email_id = $1", email_id)
                self.stop(worker, signal.SIGKILL)
                worker = self.worker(queue)
            await follow_newsletter(start.workflow_id, client=self.servers.env.client)
        finally:
            self.stop(worker)
        return await self.count(pool, case, adversary, email_id, started)

    async def send_again(self, pool, adversary: str) -> Row:
        email_id = await self.fresh_email(pool)
        queue = f"{self.QUEUE}-{self.rows}"
        settings = self.settings(queue)
        self.faults(adversary, **self.LOST_ANSWERS)
        started = time.perf_counter()
        worker = self.worker(queue, PRESSROOM_PROVIDER_RETRIES="0")
        try:
            first = await start_newsletter(email_id, client=self.servers.env.client, settings=settings)
            outcome = await follow_newsletter(first.workflow_id, client=self.servers.env.client)
        finally:
            self.stop(worker)
        assert outcome.status == "failed", "no answer was lost: the row proves nothing"
        self.faults(adversary)
        worker = self.worker(queue)
        try:
            again = await start_newsletter(email_id, client=self.servers.env.client, settings=settings)
            await follow_newsletter(again.workflow_id, client=self.servers.env.client)
        finally:
            self.stop(worker)
        return await self.count(pool, "lost, no retries, then send again", adversary, email_id, started)

    async def welcome_requeue(self, pool, adversary: str, count: int = 20) -> Row:
        self.rows += 1
        queue = f"{self.QUEUE}-{self.rows}"
        settings = self.settings(queue)
        self.sim.post("/_sim/reset").raise_for_status()
        await pool.execute("INSERT INTO automated_emails (name, slug, subject, html) VALUES "
                           "('Welcome', 'member-welcome-email-free', 'Welcome!', '<p>Welcome</p>') "
                           "ON CONFLICT (slug) DO NOTHING")
        self.faults(adversary, lost_response_rate=1.0)
        worker = self.worker(queue, PRESSROOM_OUTBOX_MAX_ATTEMPTS="1")
        started = time.perf_counter()
        addresses = [f"welcome{n}-r{self.rows}@example.com" for n in range(count)]
        try:
            keys = [(await add_member(address, welcome=True, settings=settings)).welcome_key for address in addresses]
            await until(pool, "SELECT count(*) = $2 FROM outbox WHERE idempotency_key = ANY($1::text[]) "
                              "AND status = 'aborted'", keys, count)
            self.faults(adversary)
            for outbox_id in await pool.fetch("SELECT id FROM outbox WHERE idempotency_key = ANY($1::text[])", keys):
                await requeue_outbox_entry(outbox_id["id"], client=self.servers.env.client, settings=settings)
            await until(pool, "SELECT count(*) = $2 FROM outbox WHERE idempotency_key = ANY($1::text[]) "
                              "AND status = 'succeeded'", keys, count, timeout=600)
        finally:
            self.stop(worker)
        seconds = time.perf_counter() - started
        messages = self.sim.get("/_sim/messages").json()
        counts = Counter(r["address"] for m in messages for r in m["recipients"] if r["address"] in addresses)
        statuses = {r["status"] for r in await pool.fetch(
            "SELECT status FROM outbox WHERE idempotency_key = ANY($1::text[])", keys)}
        return Row("welcome lost, no retries, then requeue", adversary, count, len(counts), count - len(counts),
                   sum(n - 1 for n in counts.values()), ",".join(sorted(statuses)), seconds)


async def until(pool, query: str, *args, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not await pool.fetchval(query, *args):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for: {query}")
        await asyncio.sleep(0.05)


def print_row(row: Row) -> None:
    print(f"| {row.case:<38} | {row.adversary:<19} | {row.eligible:>8,} | {row.received:>8,} | {row.missing:>7,} "
          f"| {row.duplicates:>10,} | {row.status:<10} | {row.seconds:>7.1f} |", flush=True)


def print_flaky_against_clean(rows: list[Row]) -> None:
    """A flaky provider's uncertain batches wait for their confirmation aside, on the run's timers,
    while the senders go on: the send takes one confirm window longer for each round in which a
    batch sent again is answered 5xx again (a 5xx before storing is only known unsent when the
    window closes), not a window per uncertain batch holding a sender."""
    clean = next(r for r in rows if r.case == "no faults")
    flaky = next(r for r in rows if r.case == "500+429" and r.adversary == "faithful")
    print(f"flaky provider (20% 500, 10% 429): {flaky.seconds:.1f} s against {clean.seconds:.1f} s without faults "
          f"(+{flaky.seconds - clean.seconds:.1f} s; the confirm window is {CONFIRM_WINDOW_SECONDS} s)")


async def main(args: argparse.Namespace) -> None:
    async with bench_servers(simulator=True) as servers:
        matrix = Matrix(servers, args.members)
        pool = await database.connect(servers.database_url, max_size=4)
        print(f"fault matrix: {args.members:,} members per email, batches of 100, 4 at a time; confirm window "
              f"{CONFIRM_WINDOW_SECONDS} s, looked up every 5 s; late events {LATE_SECONDS} s")
        print(f"| {'case':<38} | {'adversary':<19} | eligible | received | missing | duplicates | {'status':<10} "
              f"| seconds |")
        print(f"|{'-' * 40}|{'-' * 21}|{'-' * 10}|{'-' * 10}|{'-' * 9}|{'-' * 12}|{'-' * 12}|{'-' * 9}|")
        rows = []
        try:
            rows.append(await matrix.send(pool, "no faults", "faithful", {}))
            print_row(rows[-1])
            for case, faults, kill in (("500+429", ERRORS, False), ("lost answers", LOST, False),
                                       ("kill -9 of the worker mid-send", KILL, True)):
                for adversary in ("faithful", "provider ids", "events 45 s late"):
                    rows.append(await matrix.send(pool, case, adversary, faults, kill=kill))
                    print_row(rows[-1])
            rows.append(await matrix.send_again(pool, "own ids + 45 s late"))
            print_row(rows[-1])
            rows.append(await matrix.welcome_requeue(pool, "own ids + 45 s late"))
            print_row(rows[-1])
        finally:
            await pool.close()
        print_flaky_against_clean(rows)
        bad = [r for r in rows if r.missing or r.duplicates or r.status not in ("submitted", "succeeded")]
        print(f"{len(rows) - len(bad)} of {len(rows)} rows exactly once" + (f"; NOT: {bad}" if bad else ""))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=3000)
    asyncio.run(main(parser.parse_args()))

"""Benchmark: N posts scheduled for the same instant; how late were they published? (not a test)

Starts its own PostgreSQL and Temporal dev server, schedules N posts for one instant `--ahead`
seconds away through the same operation the CLI uses, runs a worker, and reads lateness
from the posts' own records (publish_completed_at - published_at): p50, p99, max, and how many
were published early (must be 0). Prints the worker's peak memory while the N posts wait.

    .venv/bin/python bench/scheduling.py --posts 1000 --ahead 60

With `--waiting N` it measures the other end instead: N posts scheduled `--days` ahead, each a
PublishPostWorkflow waiting on its durable timer, and a worker started as its own process
(`python -m worker`, as deployed): how long scheduling the N takes, how long until every one is
waiting on its timer, and that worker process's peak memory (VmHWM) and memory once they all wait.

    .venv/bin/python bench/scheduling.py --waiting 10000 --days 30

With `--during-send MEMBERS` it measures lateness while the site is busy: a newsletter to MEMBERS
members (bench/newsletter.py's seed, the simulator at `--latency-ms`, `--concurrency` batches in
flight) sends on the same worker while `--posts` posts fall due at one instant, and then while one
post falls due; beside them, in the same run, the same posts due on the idle worker. It prints each
process family's CPU from the timers (or the send, if earlier) to the last publication. With
`--ahead 120 --send-before 45` the posts' runs have started before the send, and the send is running
when their timers fire, as for posts scheduled in advance; with `--ahead 70` (the send 12 s before)
the runs start, fire and publish in the same minute as the idle phase's runs end.

    .venv/bin/python bench/scheduling.py --during-send 100000 --posts 1000 --ahead 120 --send-before 45
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


import httpx
from temporalio.api.enums.v1 import EventType

from activities.posts.models import publish_workflow_id
from activities.posts.schedule import start_or_move_publication
from bench.newsletter import DOMAIN, KEY, SEED
from bench.processes import cpu_seconds_by_family, peak_rss_mb, rss_mb
from bench.servers import bench_servers
from operations.newsletter import follow_newsletter, start_newsletter
from pressroom import database
from pressroom.settings import Settings, load_settings
from pressroom.temporal import PUBLISH_AT
from worker import running_worker, tune_garbage_collection


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def main(args: argparse.Namespace) -> None:
    async with bench_servers() as servers:
        env = servers.env
        settings = load_settings(database_url=servers.database_url, mailgun_api_key="unused", mailgun_domain="unused",
                                 task_queue="bench", publish_lead_seconds=args.lead,
                                 publish_heartbeat_seconds=args.heartbeat)
        pool = await database.connect(servers.database_url, max_size=10)
        at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=args.ahead)
        await pool.execute("INSERT INTO posts (id, title, slug, status, published_at) "
                           "SELECT 'p' || n, 'Post ' || n, 'post-' || n, 'scheduled', $2 "
                           "FROM generate_series(1, $1) n", args.posts, at)
        async with running_worker(env.client, settings):
            started = time.perf_counter()
            slots = asyncio.Semaphore(20)

            async def schedule(n: int) -> None:
                async with slots:
                    await start_or_move_publication(env.client, settings, f"p{n}", at)
            await asyncio.gather(*(schedule(n) for n in range(1, args.posts + 1)))
            scheduling = time.perf_counter() - started
            waiting_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            # From the moment the timers fire to the last publication: what each process spent.
            await until(at - timedelta(seconds=args.lead))
            mark = cpu_mark()
            while await pool.fetchval("SELECT count(*) FROM posts WHERE status = 'scheduled'"):
                if datetime.now(UTC) > at + timedelta(seconds=120):
                    break
                await asyncio.sleep(0.1)
            window, cpu = cpu_since(mark)
            phases = await phase_times(env.client, args.posts, at)
        rows = await pool.fetch("SELECT extract(epoch FROM publish_completed_at - published_at) * 1000 AS late "
                                "FROM posts WHERE status = 'published'")
        await pool.close()

    late = [float(r["late"]) for r in rows]
    print(f"scheduled posts: N={args.posts:,} due at the same instant, {args.ahead:.0f} s ahead, lead {args.lead:g} s, "
          f"heartbeat timeout {args.heartbeat:g} s")
    print(f"  scheduling the {args.posts:,} workflows took {scheduling:.1f} s")
    print(f"  published {len(late):,} of {args.posts:,}; early: {sum(v < 0 for v in late)}")
    if late:
        print(f"  lateness ms: p50 {percentile(late, 0.5):.0f}  p99 {percentile(late, 0.99):.0f}  max {max(late):.0f}")
    print(f"  peak memory of this process (worker + client) while they waited: {waiting_mb:,.0f} MB")
    print(f"  CPU from the timers firing to the last publication ({window:.1f} s): Temporal server "
          f"{cpu['temporal']:.1f} s, this process (worker + client) {cpu['python']:.1f} s, "
          f"PostgreSQL {cpu['postgres']:.1f} s")
    print_phases(phases, args.lead)


def print_phases(phases: dict[str, list[float]], lead: float) -> None:
    print("  where the time went, from the runs' histories (ms after the post's time; the timer is due at "
          f"-{lead * 1000:,.0f}):")
    for phase, values in phases.items():
        if values:
            print(f"    {phase:<34} p50 {percentile(values, 0.5):>8,.0f}  p99 {percentile(values, 0.99):>8,.0f}  "
                  f"max {max(values):>8,.0f}  (n={len(values):,})")


async def phase_times(client, n: int, at: datetime, prefix: str = "p") -> dict[str, list[float]]:
    """Per run: when its timer fired, when the publish activity was scheduled and (last) started, and
    how many attempts it took; read from the histories, so it costs nothing during the measurement."""


    phases: dict[str, list[float]] = {"timer fired": [], "its workflow task started": [],
                                      "its workflow task completed": [], "activity scheduled": [],
                                      "activity started (last attempt)": [], "attempts (count, not ms)": []}
    slots = asyncio.Semaphore(20)

    def ms(event) -> float:
        return (event.event_time.ToDatetime(UTC) - at).total_seconds() * 1000

    async def read(k: int) -> None:
        async with slots:
            history = await client.get_workflow_handle(publish_workflow_id(f"{prefix}{k}")).fetch_history()
        fired = False
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_TIMER_FIRED:
                phases["timer fired"].append(ms(event))
                fired = True
            elif fired and event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                phases["its workflow task started"].append(ms(event))
            elif fired and event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                phases["its workflow task completed"].append(ms(event))
                fired = False
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                phases["activity scheduled"].append(ms(event))
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                phases["activity started (last attempt)"].append(ms(event))
                phases["attempts (count, not ms)"].append(event.activity_task_started_event_attributes.attempt)
    await asyncio.gather(*(read(k) for k in range(1, n + 1)))
    return phases


ROOT = Path(__file__).resolve().parent.parent


def spawn_worker(servers, task_queue: str, log: Path) -> subprocess.Popen:
    """`python -m worker` on the bench servers. No Mailgun (nothing here sends), and the analytics
    schedule set a day apart so that none of its runs falls inside the measurement."""
    env = {**os.environ, "DATABASE_URL": servers.database_url,
           "TEMPORAL_ADDRESS": servers.env.client.service_client.config.target_host,
           "PRESSROOM_TASK_QUEUE": task_queue, "MAILGUN_API_KEY": "unused", "MAILGUN_DOMAIN": "bench.example",
           "MAILGUN_BASE_URL": "http://127.0.0.1:9", "PRESSROOM_ANALYTICS_INTERVAL_SECONDS": "86400"}
    return subprocess.Popen([sys.executable, "-m", "worker"], cwd=ROOT, env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT)


async def waiting(args: argparse.Namespace) -> None:

    n = args.waiting
    async with bench_servers() as servers:
        env = servers.env
        settings = load_settings(database_url=servers.database_url, mailgun_api_key="unused",
                                 mailgun_domain="bench.example", task_queue="bench-waiting")
        pool = await database.connect(servers.database_url, max_size=10)
        log = Path(tempfile.mkstemp(prefix="pressroom-bench-worker-", suffix=".log")[1])
        worker = spawn_worker(servers, settings.task_queue, log)
        samples: list[float] = []
        try:
            while "worker started" not in log.read_text():
                if worker.poll() is not None:
                    raise SystemExit(f"the worker exited ({worker.returncode}); its log: {log}")
                await asyncio.sleep(0.2)
            idle_mb = rss_mb(worker.pid)

            async def sample_memory() -> None:
                while True:
                    samples.append(rss_mb(worker.pid))
                    await asyncio.sleep(0.5)
            sampler = asyncio.create_task(sample_memory())

            at = datetime.now(UTC).replace(microsecond=0) + timedelta(days=args.days)
            await pool.execute("INSERT INTO posts (id, title, slug, status, published_at) "
                               "SELECT 'p' || n, 'Post ' || n, 'post-' || n, 'scheduled', $2 "
                               "FROM generate_series(1, $1) n", n, at)
            started = time.perf_counter()
            slots = asyncio.Semaphore(20)  # as the reconcile schedules them

            async def schedule(k: int) -> None:
                async with slots:
                    await start_or_move_publication(env.client, settings, f"p{k}", at)
            await asyncio.gather(*(schedule(k) for k in range(1, n + 1)))
            scheduling = time.perf_counter() - started
            # Each run records its time (PublishAt) in its first workflow task: then it waits on its timer.
            query = f"WorkflowType = 'PublishPostWorkflow' AND {PUBLISH_AT.name} IS NOT NULL"
            while (waiting_now := (await env.client.count_workflows(query)).count) < n:
                if time.perf_counter() - started > 1800:
                    raise TimeoutError(f"only {waiting_now:,} of {n:,} waiting after 30 minutes")
                await asyncio.sleep(1)
            all_waiting = time.perf_counter() - started
            await asyncio.sleep(args.settle)  # the worker holds them, idle: what it keeps
            settled_mb = rss_mb(worker.pid)
            peak_mb = peak_rss_mb(worker.pid)
            sampler.cancel()
            published = await pool.fetchval("SELECT count(*) FROM posts WHERE status = 'published'")
        finally:
            worker.terminate()
            worker.wait(60)
            await pool.close()

    print(f"waiting posts: N={n:,} scheduled {args.days:g} days ahead, each a PublishPostWorkflow on its timer")
    print(f"  scheduling the {n:,} (start with signal, 20 at a time, from this process) took {scheduling:.1f} s "
          f"({n / scheduling:,.0f}/s)")
    print(f"  all {n:,} waiting on their timer (first workflow task done) {all_waiting:.1f} s after the first "
          f"was scheduled; published meanwhile: {published} (must be 0)")
    print(f"  worker process (python -m worker, pid {worker.pid}): idle {idle_mb:,.0f} MB, peak {peak_mb:,.0f} MB, "
          f"{settled_mb:,.0f} MB {args.settle:g} s after all were waiting (target < 300 MB)")


async def schedule_posts(pool, client, settings, prefix: str, n: int, at: datetime) -> float:
    """N posts `{prefix}{k}` scheduled for `at` through the CLI's operation, 20 at a time; seconds taken."""
    await pool.execute("INSERT INTO posts (id, title, slug, status, published_at) "
                       "SELECT $3 || n, 'Post ' || n, $3 || '-post-' || n, 'scheduled', $2 "
                       "FROM generate_series(1, $1) n", n, at, prefix)
    started = time.perf_counter()
    slots = asyncio.Semaphore(20)

    async def schedule(k: int) -> None:
        async with slots:
            await start_or_move_publication(client, settings, f"{prefix}{k}", at)
    await asyncio.gather(*(schedule(k) for k in range(1, n + 1)))
    return time.perf_counter() - started


async def lateness_of(pool, prefix: str, at: datetime, timeout: float = 180) -> list[float]:
    """Once every post `{prefix}…` is published (or `timeout` s after `at`): each one's lateness, ms."""
    while await pool.fetchval("SELECT count(*) FROM posts WHERE id LIKE $1 || '%' AND status = 'scheduled'", prefix):
        if datetime.now(UTC) > at + timedelta(seconds=timeout):
            break
        await asyncio.sleep(0.1)
    rows = await pool.fetch("SELECT extract(epoch FROM publish_completed_at - published_at) * 1000 AS late "
                            "FROM posts WHERE id LIKE $1 || '%' AND status = 'published'", prefix)
    return [float(r["late"]) for r in rows]


def lateness_line(label: str, late: list[float], n: int) -> str:
    figures = (f"p50 {percentile(late, 0.5):,.0f}  p99 {percentile(late, 0.99):,.0f}  max {max(late):,.0f} ms"
               if late else "none published")
    return f"  {label:<44} {figures}  (published {len(late):,} of {n:,}; early: {sum(v < 0 for v in late)})"


async def until(moment: datetime) -> None:
    await asyncio.sleep(max(0.0, (moment - datetime.now(UTC)).total_seconds()))


@dataclass
class DueDuringSend:
    late: list[float]  # each post's lateness, ms
    send_started: float  # seconds after the instant (negative: before it)
    send_ended: float
    send_status: str
    at: datetime  # the instant
    cpu: str  # cpu_line's


async def due_during_send(pool, client, settings, args, prefix: str, n: int, email_id: str) -> DueDuringSend:
    """N posts due at one instant while email `email_id` sends, started `--send-before` s before it."""

    at = datetime.now(UTC) + timedelta(seconds=args.ahead)
    scheduled = await schedule_posts(pool, client, settings, prefix, n, at)
    if datetime.now(UTC) > at - timedelta(seconds=args.send_before):
        print(f"  (scheduling {n:,} posts took {scheduled:.1f} s, past the send's start: raise --ahead)", flush=True)
    await until(at - timedelta(seconds=max(args.lead, args.send_before)))  # the timers' time or the send's
    mark = cpu_mark()
    await until(at - timedelta(seconds=args.send_before))
    start = await start_newsletter(email_id, client=client, settings=settings)
    send_started = (datetime.now(UTC) - at).total_seconds()
    followed = asyncio.create_task(follow_newsletter(start.workflow_id, client=client, poll_seconds=0.2))
    late = await lateness_of(pool, prefix, at)
    cpu = cpu_line(mark)
    outcome = await followed
    send_ended = (datetime.now(UTC) - at).total_seconds()
    return DueDuringSend(late, send_started, send_ended, outcome.status, at, cpu)


def cpu_mark() -> tuple[Counter[str], float]:
    return cpu_seconds_by_family(), time.perf_counter()


def cpu_since(mark: tuple[Counter[str], float]) -> tuple[float, Counter[str]]:
    """Seconds since `mark`, and the CPU each process family spent in them."""
    cpu, started = mark
    return time.perf_counter() - started, cpu_seconds_by_family() - cpu


def cpu_line(mark: tuple[Counter[str], float]) -> str:
    """What each process family spent since `mark` (the timers' time, or the send's start if earlier)
    until the last post was published."""
    seconds, cpu = cpu_since(mark)
    return (f"    CPU from the timers (or the send) until the last was published ({seconds:.1f} s): Temporal server "
            f"{cpu['temporal']:.1f} s, PostgreSQL {cpu['postgres']:.1f} s, this process and the simulator "
            f"{cpu['python']:.1f} s")


SECOND_EMAIL = """
INSERT INTO posts (id, title, slug, html, newsletter_id, status, published_at)
VALUES ('p2', 'Bench 2', 'bench-2', '<p>Hello</p>', 'nl1', 'published', now());
INSERT INTO emails (id, post_id, newsletter_id, subject, html, plaintext) VALUES
    ('e2', 'p2', 'nl1', 'Bench issue 2', '<p>Hello %recipient.name%</p>', 'Hello');
"""


async def during_send(args: argparse.Namespace) -> None:


    async with bench_servers(simulator=True) as servers:
        env = servers.env
        httpx.post(f"{servers.simulator_url}/_sim/faults", json={"latency_ms": args.latency_ms})
        settings = load_settings(database_url=servers.database_url, mailgun_base_url=servers.simulator_url,
                                 mailgun_api_key=KEY, mailgun_domain=DOMAIN, send_concurrency=args.concurrency,
                                 members_link_secret="bench-link-secret",
                                 task_queue="bench", publish_lead_seconds=args.lead,
                                 publish_heartbeat_seconds=args.heartbeat)
        pool = await database.connect(servers.database_url, max_size=10)
        await pool.execute(SEED.format(members=args.during_send, tag="b") + SECOND_EMAIL)
        async with running_worker(env.client, settings):
            at = datetime.now(UTC) + timedelta(seconds=args.ahead)
            scheduled = await schedule_posts(pool, env.client, settings, "quiet", args.posts, at)
            if datetime.now(UTC) > at - timedelta(seconds=args.lead):
                print(f"  (scheduling {args.posts:,} posts took {scheduled:.1f} s, past their timers: raise --ahead)",
                      flush=True)
            await until(at - timedelta(seconds=args.lead))
            mark = cpu_mark()
            quiet = await lateness_of(pool, "quiet", at)
            quiet_cpu = cpu_line(mark)
            busy = await due_during_send(pool, env.client, settings, args, "busy", args.posts, "e1")
            busy_phases = await phase_times(env.client, args.posts, busy.at, "busy")
            one = await due_during_send(pool, env.client, settings, args, "one", 1, "e2")
        await pool.close()
    print(f"posts due while a newsletter to {args.during_send:,} members sends on the same worker "
          f"(simulator latency {args.latency_ms:g} ms, concurrency {args.concurrency}, lead {args.lead:g} s, "
          f"heartbeat timeout {args.heartbeat:g} s, the send started {args.send_before:g} s before the instant)")
    print(lateness_line(f"{args.posts:,} due at one instant, idle worker:", quiet, args.posts))
    print(quiet_cpu)
    for label, n, due in ((f"{args.posts:,} due at one instant during the send:", args.posts, busy),
                          ("one due during the send:", 1, one)):
        print(lateness_line(label, due.late, n))
        print(f"    the send ({due.send_status}) ran from {due.send_started:+.1f} s to {due.send_ended:+.1f} s "
              "of the instant")
        print(due.cpu)
        if n == args.posts:
            print_phases(busy_phases, args.lead)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=1000)
    parser.add_argument("--ahead", type=float, default=60)
    parser.add_argument("--lead", type=float, default=Settings.model_fields["publish_lead_seconds"].default,
                        help="how early a post's timer fires (PRESSROOM_PUBLISH_LEAD_SECONDS; default: its default)")
    parser.add_argument("--heartbeat", type=float, default=Settings.model_fields["publish_heartbeat_seconds"].default,
                        help="the publish activity's heartbeat timeout (PRESSROOM_PUBLISH_HEARTBEAT_SECONDS; default: "
                             "its default)")
    parser.add_argument("--waiting", type=int, default=0,
                        help="instead: schedule this many posts --days ahead and measure the worker's memory")
    parser.add_argument("--days", type=float, default=30)
    parser.add_argument("--settle", type=float, default=10, help="seconds to wait once all are waiting")
    parser.add_argument("--during-send", type=int, default=0, metavar="MEMBERS",
                        help="instead: posts due while a newsletter to this many members sends")
    parser.add_argument("--send-before", type=float, default=12, help="the send starts this long before the instant")
    parser.add_argument("--latency-ms", type=float, default=200)
    parser.add_argument("--concurrency", type=int, default=10)
    arguments = parser.parse_args()
    tune_garbage_collection()  # as the worker process does
    asyncio.run(during_send(arguments) if arguments.during_send else
                waiting(arguments) if arguments.waiting else main(arguments))

"""Benchmark: N posts scheduled for the same instant; how late were they published? (not a test)

Starts its own PostgreSQL and Temporal dev server, schedules N posts for one instant `--ahead`
seconds away through the same operation the CLI uses, runs a worker, and reads lateness
from the posts' own records (publish_completed_at - published_at): p50, p99, max, and how many
were published early (must be 0). Prints the worker's peak memory while the N posts wait.

    .venv/bin/python bench/scheduling.py --posts 1000 --ahead 60
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from activities.posts import start_or_move_publication  # noqa: E402
from bench.servers import bench_servers  # noqa: E402
from pressroom import database  # noqa: E402
from pressroom.settings import load_settings  # noqa: E402
from worker import running_worker  # noqa: E402


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def main(args: argparse.Namespace) -> None:
    async with bench_servers() as servers:
        env = servers.env
        settings = load_settings(database_url=servers.database_url, mailgun_api_key="unused", mailgun_domain="unused",
                                 task_queue="bench", publish_lead_seconds=args.lead)
        pool = await database.connect(servers.database_url, max_size=10)
        at = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=args.ahead)
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
            while await pool.fetchval("SELECT count(*) FROM posts WHERE status = 'scheduled'"):
                if datetime.now(timezone.utc) > at + timedelta(seconds=120):
                    break
                await asyncio.sleep(0.5)
        rows = await pool.fetch("SELECT extract(epoch FROM publish_completed_at - published_at) * 1000 AS late "
                                "FROM posts WHERE status = 'published'")
        await pool.close()

    late = [float(r["late"]) for r in rows]
    print(f"scheduled posts: N={args.posts:,} due at the same instant, {args.ahead:.0f} s ahead, lead {args.lead} s")
    print(f"  scheduling the {args.posts:,} workflows took {scheduling:.1f} s")
    print(f"  published {len(late):,} of {args.posts:,}; early: {sum(v < 0 for v in late)}")
    if late:
        print(f"  lateness ms: p50 {percentile(late, 0.5):.0f}  p99 {percentile(late, 0.99):.0f}  max {max(late):.0f}")
    print(f"  peak memory of this process (worker + client) while they waited: {waiting_mb:,.0f} MB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=1000)
    parser.add_argument("--ahead", type=float, default=60)
    parser.add_argument("--lead", type=float, default=10)
    asyncio.run(main(parser.parse_args()))

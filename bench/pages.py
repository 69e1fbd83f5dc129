"""Benchmark: the dashboard's pages on a large site (not a test). Goal: every page under 300 ms.

Seeds the site of bench/reads.py (its own PostgreSQL: a million members, an email sent to about a
million of them, with what analytics records), starts the front door on a free loopback port with
a staff member, signs in, and asks each page `--repeat` times, one request at a time, printing
p50 and p99 of the time from request to the last byte (loopback: the server's time, plus
microseconds). Health is left out: it asks Temporal and the provider, which this bench does not run.

    .venv/bin/python bench/pages.py --members 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.reads import seed
from devstack.servers import Postgres, free_port
from frontdoor.server import FrontDoor
from operations.staff import add_staff
from pressroom import database
from pressroom.settings import load_settings

PASSWORD = "a bench password"


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


async def timed(http: httpx.AsyncClient, name: str, path: str, repeat: int) -> None:
    seconds = []
    for _ in range(repeat):
        began = time.perf_counter()
        answer = await http.get(path)
        seconds.append(time.perf_counter() - began)
        assert answer.status_code == 200, (path, answer.status_code)
    p50, p99 = statistics.median(seconds), percentile(seconds, 0.99)
    print(f"  {name:<48} p50 {p50 * 1000:7.1f} ms   p99 {p99 * 1000:7.1f} ms", flush=True)


async def main(members: int, repeat: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="pressroom-bench-pages-"))
    postgres = Postgres(folder / "postgres", free_port())
    postgres.start(durable=False)
    try:
        await database.migrate(postgres.url)
        print(f"seeding {members:,} members", flush=True)
        await seed(postgres.url, members)
        settings = load_settings(database_url=postgres.url, members_link_secret="b" * 32,
                                 webhook_signing_key="bench-key", mailgun_api_key="bench", mailgun_domain="bench")
        await add_staff("bench@example.com", PASSWORD, settings=settings)
        pool = await database.connect(postgres.url, max_size=10)
        door = FrontDoor(pool, settings)
        port = free_port()
        await door.start("127.0.0.1", port)
        try:
            counts = await pool.fetchrow("SELECT (SELECT count(*) FROM members) AS members, "
                                         "(SELECT count(*) FROM email_recipients) AS recipients")
            deep = await pool.fetchval("SELECT id FROM members ORDER BY created_at DESC, id DESC OFFSET $1 LIMIT 1",
                                       members * 9 // 10)
            someone = await pool.fetchval("SELECT id FROM members ORDER BY id LIMIT 1 OFFSET $1", members // 3)
            print(f"{counts['members']:,} members; email e1 has {counts['recipients']:,} recipients")
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
                page = await http.get("/pressroom/sign-in")
                csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
                signed = await http.post("/pressroom/sign-in", data={"csrf": csrf, "email": "bench@example.com",
                                                                     "password": PASSWORD})
                assert signed.status_code == 303, signed.text
                print(f"server time per page ({repeat} requests each, one at a time):")
                await timed(http, "newsletters", "/pressroom/newsletters", repeat)
                await timed(http, "the report of e1", "/pressroom/emails/e1", repeat)
                await timed(http, "members search (an address's part)", "/pressroom/members?q=member12", repeat)
                await timed(http, "members search (a rare name part)", "/pressroom/members?q=zz-nobody", repeat)
                await timed(http, "members, filtered, 90% deep",
                            f"/pressroom/members?filter=status:free&after={deep}", repeat)
                await timed(http, "a member's story", f"/pressroom/members/{someone}", repeat)
        finally:
            await door.stop()
            await pool.close()
    finally:
        postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=50)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.members, arguments.repeat))

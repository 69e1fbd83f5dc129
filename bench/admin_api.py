"""The Admin API's members browse with a filter over many members, pages deep: OFFSET pages (what
`page=N` asks) against keyset pages (`created_at:<'TIME'`), beside the raw statement.

`pressroom serve` runs as its own process against a fresh PostgreSQL with `--members` members (a
tenth labelled `vip`, distinct creation times). Each request carries a fresh token, as the
reference's client sends, and asks `filter=label:vip&limit=100`. The server reuses a filter's total
and each page's start for a few seconds (frontdoor/admin_api/recent.py): the p99 of each line is
mostly its first request. p50/p99 of `--repeat` requests at each depth.

With `--publish N`: a post added and published with a newsletter through the API (a worker on a
Temporal dev server, the Mailgun simulator as its own process, `--members` subscribers), N times:
from the request to its answer, and to the first batch the simulator accepted.

    .venv/bin/python bench/admin_api.py [--members 1000000] [--repeat 30]
    .venv/bin/python bench/admin_api.py --publish 20 --members 1000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp
import jwt

from bench.processes import stop_server
from bench.servers import SIMULATOR_DOMAIN, SIMULATOR_KEY, bench_servers
from bench.unsubscribe import percentile, wait_for_port
from devstack.servers import Postgres, free_port
from frontdoor.server import FrontDoor
from operations.integrations import add_integration
from pressroom import database
from pressroom.settings import load_settings
from worker import running_worker

SEED = """
INSERT INTO members (email, status, created_at)
SELECT 'member' || n || '@example.com', CASE WHEN n % 10 = 0 THEN 'paid' ELSE 'free' END,
       '2020-01-01T00:00:00Z'::timestamptz + n * interval '1 second'
FROM generate_series(1, {members}) n;
INSERT INTO labels (name, slug) VALUES ('VIP', 'vip');
INSERT INTO members_labels (member_id, label_id) SELECT m.id, l.id FROM members m, labels l
WHERE m.email ~ '^member[0-9]*0@';
ANALYZE
"""


def token(key: str) -> str:
    key_id, secret = key.split(":")
    now = int(time.time())
    return jwt.encode({"iat": now, "exp": now + 300, "aud": "/admin/"}, bytes.fromhex(secret), algorithm="HS256",
                      headers={"kid": key_id})


def line(name: str, latencies: list[float]) -> None:
    print(f"  {name:<58} p50 {statistics.median(latencies) * 1000:8.1f} ms   p99 "
          f"{percentile(latencies, 0.99) * 1000:8.1f} ms", flush=True)


async def timed(work, repeat: int) -> list[float]:
    latencies = []
    for _ in range(repeat):
        began = time.perf_counter()
        await work()
        latencies.append(time.perf_counter() - began)
    return latencies


def start_server(port: int, env: dict[str, str], log: Path) -> subprocess.Popen:
    """`pressroom serve` as its own process, its output in `log`."""
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "starter", "serve", "--port", str(port)], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT)


async def main(members: int, repeat: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="pressroom-bench-admin-api-"))
    postgres = Postgres(folder / "postgres", free_port())
    postgres.start(durable=False)
    server = None
    try:
        await database.migrate(postgres.url)
        pool = await database.connect(postgres.url, max_size=2)
        began = time.perf_counter()
        for statement in SEED.format(members=members).strip().split(";\n"):
            await pool.execute(statement, timeout=3600)  # a busy machine's seed outlasts the pool's 300 s
        labelled = await pool.fetchval("SELECT count(*) FROM members_labels")
        print(f"{members:,} members, {labelled:,} labelled vip, seeded in {time.perf_counter() - began:.0f} s",
              flush=True)
        settings = load_settings(database_url=postgres.url)
        key = (await add_integration("bench", settings=settings)).admin_api_key

        port = free_port()
        log = folder / "serve.log"
        env = {**os.environ, "DATABASE_URL": postgres.url, "PRESSROOM_MEMBERS_LINK_SECRET": "bench-link-secret",
               "MAILGUN_WEBHOOK_SIGNING_KEY": "bench-signing-key"}
        server = start_server(port, env, log)
        wait_for_port(port, server, log)
        base = f"http://127.0.0.1:{port}/ghost/api/admin/members/"
        async with aiohttp.ClientSession() as http:
            async def browse(params: dict) -> dict:
                async with http.get(base, params=params, headers={"Authorization": f"Ghost {token(key)}"}) as answer:
                    body = await answer.json()
                    assert answer.status == 200, body
                    assert len(body["members"]) == 100, len(body["members"])
                    return body

            await browse({"filter": "label:vip", "limit": "100"})  # warm
            pages = labelled // 100
            for page in sorted({1, 10, pages // 10, pages // 2, pages - 1} - {0}):
                offset = await timed(lambda p=page: browse({"filter": "label:vip", "limit": "100", "page": str(p)}),
                                     repeat)
                line(f"page={page:,} (OFFSET {(page - 1) * 100:,})", offset)
                bound = await pool.fetchval(
                    "SELECT m.created_at FROM members m JOIN members_labels ml ON ml.member_id = m.id "
                    "ORDER BY m.created_at DESC OFFSET $1 LIMIT 1", (page - 1) * 100 - 1) if page > 1 else None
                keyed = "label:vip" + (f"+created_at:<'{bound.isoformat()}'" if bound else "")
                keyset = await timed(lambda f=keyed: browse({"filter": f, "limit": "100"}), repeat)
                line("  the same page by keyset (created_at:<)", keyset)
            raw = await timed(lambda: pool.fetch(
                "SELECT m.id FROM members m WHERE m.id IN (SELECT ml.member_id FROM members_labels ml JOIN labels l "
                "ON l.id = ml.label_id WHERE l.slug = 'vip') ORDER BY m.created_at DESC LIMIT 100"), repeat)
            line("raw: the first page's ids alone (asyncpg, no count)", raw)
            count = await timed(lambda: pool.fetchval(
                "SELECT count(*) FROM members m WHERE m.id IN (SELECT ml.member_id FROM members_labels ml "
                "JOIN labels l ON l.id = ml.label_id WHERE l.slug = 'vip')"), repeat)
            line("raw: the filter's total counted over the members", count)
        await pool.close()
    finally:
        stop_server(server)
        postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)


async def publish(times: int, members: int) -> None:

    async with bench_servers(simulator=True) as servers:
        settings = load_settings(
            database_url=servers.database_url, mailgun_base_url=servers.simulator_url, mailgun_api_key=SIMULATOR_KEY,
            mailgun_domain=SIMULATOR_DOMAIN, temporal_address=servers.env.client.service_client.config.target_host,
            members_link_secret="bench-link-secret", webhook_signing_key="bench-signing-key",
            task_queue="bench-admin-api", publish_lead_seconds=1.0, from_address="news@example.com")
        pool = await database.connect(servers.database_url, max_size=10)
        await pool.execute("INSERT INTO newsletters (name, slug) VALUES ('Weekly', 'weekly')")
        await pool.execute("INSERT INTO members (email) SELECT 'reader' || n || '@example.com' "
                           "FROM generate_series(1, $1) n", members)
        await pool.execute("INSERT INTO members_newsletters (member_id, newsletter_id) "
                           "SELECT m.id, n.id FROM members m, newsletters n")
        key = (await add_integration("bench", settings=settings)).admin_api_key
        door = FrontDoor(pool, settings)
        port = free_port()
        await door.start("127.0.0.1", port)
        answered, accepted = [], []
        try:
            async with running_worker(servers.env.client, settings), aiohttp.ClientSession() as http:
                print(f"{members:,} subscribers; a worker in this process; posts added and published {times} times",
                      flush=True)
                for n in range(times):
                    began = time.perf_counter()
                    async with http.post(f"http://127.0.0.1:{port}/ghost/api/admin/posts/",
                                         params={"source": "html", "newsletter": "weekly"},
                                         json={"posts": [{"title": f"Issue {n}", "html": "<p>news</p>",
                                                          "status": "published"}]},
                                         headers={"Authorization": f"Ghost {token(key)}"}) as answer:
                        body = await answer.json()
                        assert answer.status == 201, body
                    answered.append(time.perf_counter() - began)
                    email_id = body["posts"][0]["email"]["id"]
                    deadline = time.monotonic() + 120
                    while True:
                        if time.monotonic() > deadline:
                            state = await pool.fetchrow("SELECT p.status, e.status AS email, e.error FROM posts p "
                                                        "JOIN emails e ON e.post_id = p.id WHERE e.id = $1", email_id)
                            raise SystemExit(f"no batch of email {email_id} accepted in 120 s: {dict(state)}")
                        async with http.get(f"{servers.simulator_url}/_sim/messages",
                                            params={"email_id": email_id}) as found:
                            if await found.json():
                                break
                        await asyncio.sleep(0.01)
                    accepted.append(time.perf_counter() - began)
        finally:
            await door.stop()
            await pool.close()
        line("request to its answer (the post published)", answered)
        line("request to the first batch accepted by the provider", accepted)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--publish", type=int, default=0, help="add and publish N posts instead")
    args = parser.parse_args()
    asyncio.run(publish(args.publish, args.members) if args.publish else main(args.members, args.repeat))

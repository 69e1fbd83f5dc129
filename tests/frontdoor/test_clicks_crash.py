"""`pressroom serve` killed -9 in the middle of a burst of clicks: every click answered 302 is stored
exactly once (its commit came before its answer), none twice; the next server settles the readers'
clicks the killed one left waiting."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import aiohttp
import pytest

from devstack.link_followers import BROWSER
from devstack.servers import free_port
from tests.operations.test_waiting import cli_env, start_cli

CLICKS = 1500


async def serve(port: int, env: dict) -> asyncio.subprocess.Process:
    process = await start_cli("serve", "--port", str(port), env=env)
    line = await asyncio.wait_for(process.stdout.readline(), 60)
    assert b"front door on" in line, (await process.stderr.read()).decode()
    return process


@pytest.mark.crash
async def test_every_click_answered_before_a_kill_is_stored_exactly_once(dev_env, db, settings):
    await db.execute("INSERT INTO posts (id, title, slug) VALUES ('p1', 'Issue', 'issue')")
    await db.execute("""INSERT INTO redirects (id, "from", "to", post_id)
                        VALUES ('abc123', '/r/abc123', 'https://example.com/story', 'p1')""")
    await db.execute("INSERT INTO members (id, email) SELECT 'c' || n, 'c' || n || '@example.com' "
                     "FROM generate_series(1, $1) n", CLICKS)
    members = [(r["id"], r["uuid"]) for r in await db.fetch("SELECT id, uuid::text AS uuid FROM members")]
    port = free_port()
    env = cli_env(settings, dev_env, MAILGUN_WEBHOOK_SIGNING_KEY="crash-test-key")
    server = await serve(port, env)
    answered: set[str] = set()
    a_third = asyncio.Event()
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64),
                                         headers={"User-Agent": BROWSER}) as http:
            async def click(member_id: str, member_uuid: str) -> None:
                try:
                    async with http.get(f"http://127.0.0.1:{port}/r/abc123?m={member_uuid}",
                                        allow_redirects=False) as response:
                        await response.read()
                        if response.status == 302:
                            assert response.headers["Location"] == "https://example.com/story"
                            answered.add(member_id)
                            if len(answered) >= CLICKS // 3:
                                a_third.set()
                except (TimeoutError, aiohttp.ClientError):
                    pass  # no answer: the click may or may not be stored, never twice

            queue = list(members)

            async def reader() -> None:
                while queue:
                    await click(*queue.pop())

            async def kill() -> None:
                await a_third.wait()
                os.kill(server.pid, signal.SIGKILL)

            await asyncio.gather(kill(), *(reader() for _ in range(32)))
        await server.wait()
        assert CLICKS // 3 <= len(answered) < CLICKS  # killed mid-burst

        stored = {r["member_id"]: r["n"] for r in await db.fetch(
            "SELECT member_id, count(*) AS n FROM members_click_events GROUP BY member_id")}
        assert [m for m in answered if stored.get(m) != 1] == []  # every answered click, exactly once
        assert max(stored.values()) == 1
        assert await db.fetchval("SELECT count(*) FROM members_click_events WHERE scanner IS NOT NULL") == 0

        # The next server settles what the killed one left (from its first click on).
        waiting = await db.fetchval("SELECT count(*) FROM members_click_events_unsettled")
        server = await serve(port, env)
        async with aiohttp.ClientSession(headers={"User-Agent": BROWSER}) as http, http.get(f"http://127.0.0.1:{port}/r/abc123",
                                                              allow_redirects=False) as response:
            assert response.status == 302
        deadline = time.monotonic() + 60
        while await db.fetchval("SELECT count(*) FROM members_click_events_unsettled"):
            assert time.monotonic() < deadline, f"{waiting} clicks left unsettled"
            await asyncio.sleep(0.2)
        assert await db.fetchval("SELECT count(last_seen_at) FROM members") == len(stored)
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()

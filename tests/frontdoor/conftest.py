"""The front door on a free port in this process (real sockets, its own pool, short deadlines), the
seeded site, and links made as the reference platform makes them (the hmac module, not ours)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlencode

import pytest

from devstack.servers import free_port
from frontdoor.server import FrontDoor
from pressroom import database
from pressroom.settings import Settings
from tests.analytics.conftest import seed_newsletter
from tests.conftest import TEST_LINK_SECRET


@dataclass
class RunningDoor:
    door: FrontDoor
    base: str
    port: int
    settings: Settings


async def open_door(settings: Settings, **overrides) -> RunningDoor:
    settings = settings.model_copy(update=overrides)
    pool = await database.connect(settings.database_url, max_size=10)
    door = FrontDoor(pool, settings)
    port = free_port()
    await door.start("127.0.0.1", port)
    return RunningDoor(door, f"http://127.0.0.1:{port}", port, settings)


async def close_door(running: RunningDoor) -> None:
    await running.door.stop()
    await running.door.pool.close()


@pytest.fixture
async def front_door(webhook_settings: Settings) -> AsyncIterator[RunningDoor]:
    """Deadlines of one second, so that a test sees a half-sent request dropped quickly."""
    running = await open_door(webhook_settings, serve_header_timeout_seconds=1.0, serve_body_timeout_seconds=1.0)
    try:
        yield running
    finally:
        await close_door(running)


@dataclass
class Site:
    newsletter_uuid: str  # nl1, "Weekly", which emails e0 and e1 were sent for
    other_newsletter_uuid: str  # nl2, "Daily"
    members: dict[str, str]  # member id → uuid


@pytest.fixture
async def site(db) -> Site:
    """Members m0…m4 subscribed to nl1 (Weekly: emails e0, e1 sent to them all) and nl2 (Daily)."""
    await seed_newsletter(db, members=5, emails=2)
    await db.execute("INSERT INTO newsletters (id, name, slug) VALUES ('nl2', 'Daily', 'daily')")
    await db.execute("INSERT INTO members_newsletters (member_id, newsletter_id) SELECT id, 'nl2' FROM members")
    newsletters = {r["id"]: str(r["uuid"]) for r in await db.fetch("SELECT id, uuid FROM newsletters")}
    members = {r["id"]: str(r["uuid"]) for r in await db.fetch("SELECT id, uuid FROM members")}
    return Site(newsletters["nl1"], newsletters["nl2"], members)


def reference_key(member_uuid: str, secret: str = TEST_LINK_SECRET) -> str:
    """The reference platform's key, computed independently of Pressroom's code."""
    return hmac.new(secret.encode("utf-8"), member_uuid.encode("utf-8"), hashlib.sha256).hexdigest()


def link(base: str, member_uuid: str, *, key: str | None = "reference", newsletter: str | None = None,
         email: str | None = None) -> str:
    query = {"uuid": member_uuid}
    if key is not None:
        query["key"] = reference_key(member_uuid) if key == "reference" else key
    if newsletter:
        query["newsletter"] = newsletter
    if email:
        query["email"] = email
    return f"{base}/unsubscribe/?{urlencode(query)}"

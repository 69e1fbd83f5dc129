"""Webhook fixtures: a receiver on a free port (in this process, or as `pressroom webhooks serve`),
signed requests as Mailgun makes them, and the inbox applied by a worker."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from devstack.servers import free_port
from frontdoor.receiver import Receiver
from operations.webhooks import ensure_inbox_applier
from pressroom import database
from pressroom.providers.mailgun import MailgunPush, webhook_signature
from pressroom.settings import Settings


class RunningReceiver:
    def __init__(self, receiver: Receiver, url: str) -> None:
        self.receiver, self.url = receiver, url


@pytest.fixture
async def receiver(webhook_settings: Settings) -> AsyncIterator[RunningReceiver]:
    """A receiver in this process, on a free port, with a pool of its own."""
    pool = await database.connect(webhook_settings.database_url, max_size=10)
    receiver = Receiver(pool, webhook_settings)
    runner = web.AppRunner(receiver.app(), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield RunningReceiver(receiver, f"http://127.0.0.1:{port}{MailgunPush.path}")
    finally:
        await runner.cleanup()
        await pool.close()


def signed(event: dict[str, Any], key: str, *, timestamp: int | None = None, token: str | None = None,
           signature: str | None = None) -> dict[str, Any]:
    """A webhook request body as Mailgun signs it (anymail's mailgun_signature helper, here)."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    token = token or secrets.token_hex(25)
    return {"signature": {"timestamp": stamp, "token": token,
                          "signature": signature or webhook_signature(key, stamp, token)},
            "event-data": event}


def delivered(n: int, email_id: str = "e0", at: float | None = None, kind: str = "delivered",
              **extra: Any) -> dict[str, Any]:
    return {"id": f"push-{kind}-{n}-{uuid.uuid4().hex[:6]}", "event": kind,
            "timestamp": time.time() - 5 if at is None else at, "recipient": f"member{n}@example.com",
            "user-variables": {"email-id": email_id}, "message": {"headers": {"message-id": "x@mg"}}, **extra}


async def post(url: str, body: Any, *, raw: bytes | None = None) -> int:
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(url, content=raw if raw is not None else json.dumps(body).encode(),
                                   headers={"Content-Type": "application/json"})
        return response.status_code


async def eventually(check, *, seconds: float = 60.0, every: float = 0.1):
    """Poll `check` (async, answering a truthy value) until it holds or the deadline passes."""
    deadline = time.monotonic() + seconds
    while True:
        value = await check()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(every)


async def start_inbox(dev_env, settings: Settings) -> None:
    await ensure_inbox_applier(dev_env.client, settings)

"""Heartbeating while an activity waits on something long (a big statement, a slow HTTP call, the next
NOTIFY)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from temporalio import activity

# A first beat this late still comes well inside the heartbeat timeouts that use it (the send's: 5 s at
# the shortest, `send_heartbeat_seconds`).
FIRST_HEARTBEAT_SECONDS = 2.0


@asynccontextmanager
async def heartbeating(every: float = 2.0, *, first_after: float = 0.0) -> AsyncIterator[None]:
    """Heartbeat while a long statement runs, so a dead worker is noticed by the heartbeat timeout.

    `first_after` seconds pass before the first beat: work that is usually done by then sends none
    (a heartbeat is a request to the server), and still beats when it is not.
    """
    async def beat() -> None:
        if first_after:
            await asyncio.sleep(first_after)
        while True:
            activity.heartbeat()
            await asyncio.sleep(every)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()


WAIT_HEARTBEAT_SECONDS = 2.0  # well inside a 10 s heartbeat timeout


@asynccontextmanager
async def woken_by_notify(database_url: str, channel: str) -> AsyncIterator[asyncio.Event]:
    """An event set by every NOTIFY on `channel` (a row committed for a long-running activity to
    take), and when the worker shuts down, so a stopping worker hands the activity back at once."""

    wake = asyncio.Event()
    listener = await asyncpg.connect(database_url)
    await listener.add_listener(channel, lambda *_: wake.set())

    async def wake_at_worker_shutdown() -> None:
        await activity.wait_for_worker_shutdown()
        wake.set()

    shutdown = asyncio.create_task(wake_at_worker_shutdown())
    try:
        yield wake
    finally:
        shutdown.cancel()
        await listener.close()


async def wait_for_work(wake: asyncio.Event, seconds: float, details: Any = None) -> None:
    """Until a NOTIFY or `seconds` pass, heartbeating `details` every WAIT_HEARTBEAT_SECONDS meanwhile,
    so that the heartbeat timeout holds however long the poll interval is set."""
    until = time.monotonic() + seconds
    while not wake.is_set() and (left := until - time.monotonic()) > 0:
        try:
            await asyncio.wait_for(wake.wait(), min(left, WAIT_HEARTBEAT_SECONDS))
        except TimeoutError:
            activity.heartbeat(details)
    wake.clear()

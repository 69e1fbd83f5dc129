"""Heartbeating while an activity waits on something long (a big statement, a slow HTTP call)."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

from temporalio import activity


@asynccontextmanager
async def heartbeating(every: float = 2.0):
    """Heartbeat while a long statement runs, so a dead worker is noticed by the heartbeat timeout."""
    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(every)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()

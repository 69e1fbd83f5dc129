"""Heartbeating while an activity waits on something long (a big statement, a slow HTTP call)."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

from temporalio import activity


@asynccontextmanager
async def heartbeating(every: float = 2.0, *, first_after: float = 0.0):
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

"""A worker's health endpoint, beside its metrics (PRESSROOM_WORKER_HEALTH_PORT): GET /healthz is 200
`ok` while this process polls its task queue and reaches PostgreSQL, else 503 naming what fails, so an
orchestrator can tell a worker that lost Temporal or the database from a healthy one."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web
from temporalio.client import Client

from operations.waiting import fresh_pollers
from pressroom import database
from pressroom.settings import Settings

log = logging.getLogger(__name__)

HEALTH_PATH = "/healthz"
CHECK_SECONDS = 5.0  # each dependency's answer; an orchestrator's probe usually waits longer


async def health_problems(client: Client, pool, task_queue: str) -> list[str]:
    """What fails, one phrase each; [] when healthy."""

    async def postgresql() -> str | None:
        try:
            await asyncio.wait_for(pool.fetchval("SELECT 1"), CHECK_SECONDS)
        except Exception as error:  # noqa: BLE001 (any failure is the database's, named by its class only)
            return f"postgresql unavailable ({error.__class__.__name__})"
        return None

    async def temporal() -> str | None:
        try:
            pollers = await asyncio.wait_for(fresh_pollers(client, task_queue), CHECK_SECONDS)
        except TimeoutError:
            pollers = None
        if pollers is None:
            return "temporal unavailable (the task queue cannot be described)"
        if client.identity not in pollers:
            return f"temporal: this worker has not polled task queue {task_queue} lately"
        return None

    return [problem for problem in await asyncio.gather(postgresql(), temporal()) if problem]


@asynccontextmanager
async def serving_health(client: Client, settings: Settings, port: int | None = None) -> AsyncIterator[int]:
    """The endpoint on PRESSROOM_METRICS_HOST:port (PRESSROOM_WORKER_HEALTH_PORT) for the block; its port.
    It reaches PostgreSQL on a connection of its own, so a worker's full pool does not read as down."""

    pool = await database.connect(settings.require_database(), min_size=0, max_size=1)

    async def health(request: web.Request) -> web.Response:
        problems = await health_problems(client, pool, settings.task_queue)
        return web.Response(status=503 if problems else 200, text="; ".join(problems) or "ok")

    app = web.Application()
    app.add_routes([web.get(HEALTH_PATH, health)])
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    # A socket of its own, so that port 0 (tests) reports the port it was given.
    sock = socket.create_server((settings.metrics_host, settings.worker_health_port if port is None else port))
    try:
        await web.SockSite(runner, sock).start()
        bound = sock.getsockname()[1]
        log.info("health on http://%s:%d%s", settings.metrics_host, bound, HEALTH_PATH)
        yield bound
    finally:
        await runner.cleanup()
        sock.close()
        await pool.close()

"""The Pressroom worker: registers every workflow in `workflows/` and every activity in `activities/`.

Run it with `pressroom worker` (or `python worker.py`). Any number of workers may share the task
queue; nothing in a worker's memory is needed after it stops.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import pkgutil
import signal
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import AsyncIterator, Callable

from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker

import activities
import workflows
from operations.analytics import ensure_schedule as ensure_analytics_schedule
from operations.outbox import ensure_relay as ensure_outbox_relay
from operations.posts import reconcile_at_worker_start
from pressroom import database
from pressroom.dependencies import Dependencies
from pressroom.settings import Settings, get_settings

log = logging.getLogger("pressroom.worker")


def _modules(package) -> list:
    return [importlib.import_module(f"{package.__name__}.{info.name}")
            for info in pkgutil.iter_modules(package.__path__)]


def discover_workflows() -> list[type]:
    """Every class in workflows/ decorated with @workflow.defn."""
    found = []
    for module in _modules(workflows):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and hasattr(cls, "__temporal_workflow_definition"):
                found.append(cls)
    return found


def discover_activities(deps: Dependencies) -> list[Callable]:
    """The bound @activity.defn methods of every `*Activities` class in activities/.

    Each class is built once with the process's dependencies, as the samples build theirs.
    """
    found = []
    for module in _modules(activities):
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__ or not name.endswith("Activities"):
                continue
            instance = cls(deps)
            for _, method in inspect.getmembers(instance, inspect.ismethod):
                if hasattr(method, "__temporal_activity_definition"):
                    found.append(method)
    return found


@asynccontextmanager
async def open_dependencies(settings: Settings, client: Client) -> AsyncIterator[Dependencies]:
    from pressroom.mailgun import MailgunClient

    pool = await database.connect(settings.require_database(), max_size=20)
    mailgun = MailgunClient.from_settings(settings)
    try:
        yield Dependencies(settings=settings, pool=pool, mailgun=mailgun, temporal=client)
    finally:
        await mailgun.aclose()
        await pool.close()


def build_worker(client: Client, deps: Dependencies, *, task_queue: str | None = None,
                 **options) -> Worker:
    return Worker(
        client,
        task_queue=task_queue or deps.settings.task_queue,
        workflows=discover_workflows(),
        activities=discover_activities(deps),
        # On SIGTERM in-flight activities get this long to finish before they are handed back.
        graceful_shutdown_timeout=timedelta(seconds=20),
        max_concurrent_activities=deps.settings.worker_max_activities,
        **options,
    )


@asynccontextmanager
async def running_worker(client: Client, settings: Settings, **options) -> AsyncIterator[Worker]:
    """A worker running in the background of the caller (tests, the demo)."""
    async with open_dependencies(settings, client) as deps:
        async with build_worker(client, deps, **options) as worker:
            yield worker


def metrics_runtime(settings: Settings) -> Runtime | None:
    """With PRESSROOM_METRICS_PORT set, a runtime serving Prometheus metrics on /metrics there.

    The SDK's own metrics (task latencies, slots, failures) and Pressroom's (made with
    `activity.metric_meter()` / `workflow.metric_meter()`) share the endpoint, prefixed
    `temporal_` and `pressroom_` respectively.
    """
    if not settings.metrics_port:
        return None
    return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(
        bind_address=f"{settings.metrics_host}:{settings.metrics_port}", durations_as_seconds=True)))


async def run(settings: Settings | None = None) -> None:
    """Run until SIGINT or SIGTERM, then shut down gracefully."""
    from pressroom.temporal import connect

    settings = settings or get_settings()
    client = await connect(settings, runtime=metrics_runtime(settings))
    if settings.metrics_port:
        log.info("metrics on http://%s:%d/metrics", settings.metrics_host, settings.metrics_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with running_worker(client, settings):
        await ensure_analytics_schedule(client, settings)  # analytics: the schedule exists, at current settings
        await reconcile_at_worker_start(client, settings)  # posts: every scheduled post has its timer
        await ensure_outbox_relay(client, settings)  # outbox: the relay runs
        log.info("worker started on task queue %s", settings.task_queue)
        await stop.wait()
        log.info("worker stopping: in-flight activities finish or are handed back")
    log.info("worker stopped")


def main() -> None:
    from pressroom import tracing
    from pressroom.temporal import close_runtime

    tracing.configure_from_environment()
    configure_logging(get_settings())
    try:
        asyncio.run(run())
    finally:
        close_runtime()  # join the runtime's threads before the interpreter shuts down (see starter)


def configure_logging(settings: Settings) -> None:
    """Structured lines that never carry the Mailgun key or a member's address."""
    from pressroom import logs

    logs.configure(secrets=[settings.mailgun_api_key.get_secret_value()], log_format=settings.log_format)


if __name__ == "__main__":
    main()

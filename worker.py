"""The Pressroom worker: registers the workflows and activities it lists below.

Run it with `pressroom worker` (or `python worker.py`). Any number of workers may share the task
queue; nothing in a worker's memory is needed after it stops.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta

from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime
from temporalio.worker import Worker

from activities.account_quota import AccountQuotaActivities
from activities.analytics.run import AnalyticsActivities
from activities.automations.run import AutomationActivities
from activities.newsletter.batches import BatchCreationActivities
from activities.newsletter.finish import EmailFinishActivities
from activities.newsletter.lock import EmailLockActivities
from activities.newsletter.reputation import ReputationActivities
from activities.newsletter.send import BatchSendActivities
from activities.outbox.delivery import OutboxDeliveryActivities
from activities.outbox.models import webhooks_task_queue
from activities.outbox.relay import OutboxRelayActivities
from activities.posts.publish import PostsActivities
from activities.retention import RetentionActivities
from activities.sending_limits import SendingLimitsActivities
from activities.webhooks import WebhookActivities
from operations.analytics import analytics_schedule_id
from operations.analytics import ensure_schedule as ensure_analytics_schedule
from operations.outbox import ensure_relay as ensure_outbox_relay
from operations.posts import reconcile_at_worker_start, reconcile_schedule_id
from operations.restore import restart_lost_runs
from operations.retention import ensure_retention_schedule, retention_schedule_id
from operations.webhooks import ensure_inbox_applier
from operations.worker_health import serving_health
from pressroom import database, logs, tracing_export
from pressroom.dependencies import Dependencies
from pressroom.providers.wiring import provider_from_settings
from pressroom.settings import Settings, get_settings
from pressroom.temporal import close_runtime, connect, telemetry
from workflows.analytics import FetchEmailAnalyticsWorkflow
from workflows.automations import AutomationRunWorkflow
from workflows.newsletter import SendNewsletterWorkflow
from workflows.outbox import DeliverOutboxEntryWorkflow, OutboxRelayWorkflow
from workflows.posts import PublishPostWorkflow, ReconcilePostsWorkflow
from workflows.retention import RecipientRetentionWorkflow
from workflows.webhooks import WebhookInboxWorkflow

log = logging.getLogger("pressroom.worker")
GC_YOUNG_THRESHOLD = 10_000  # new objects between collections of the youngest generation (default 700)
# On SIGTERM in-flight activities get this long to finish before they are handed back; the service
# files' stop timeout (deploy/systemd/pressroom-worker.service) leaves room for it.
GRACEFUL_SHUTDOWN = timedelta(seconds=20)


# Everything this worker runs, in one place (as the samples' run_worker.py lists it).
WORKFLOWS: list[type] = [
    SendNewsletterWorkflow,
    OutboxRelayWorkflow, DeliverOutboxEntryWorkflow,
    FetchEmailAnalyticsWorkflow,
    PublishPostWorkflow, ReconcilePostsWorkflow,
    WebhookInboxWorkflow,
    RecipientRetentionWorkflow,
    AutomationRunWorkflow,
]


def build_activities(deps: Dependencies) -> list[Callable]:
    """The activities this worker runs: each class built once with the process's dependencies."""
    email_lock = EmailLockActivities(deps)
    batch_creation = BatchCreationActivities(deps)
    batch_send = BatchSendActivities(deps)
    email_finish = EmailFinishActivities(deps)
    reputation = ReputationActivities(deps)
    outbox_relay = OutboxRelayActivities(deps)
    outbox_delivery = OutboxDeliveryActivities(deps)
    analytics = AnalyticsActivities(deps)
    posts = PostsActivities(deps)
    sending_limits = SendingLimitsActivities(deps)
    account_quota = AccountQuotaActivities(deps)
    webhooks = WebhookActivities(deps)
    retention = RetentionActivities(deps)
    automations = AutomationActivities(deps)
    return [
        email_lock.lock_email, batch_creation.create_batches,
        batch_send.list_unsent_batches, batch_send.send_batch, batch_send.send_batches, batch_send.fail_batch,
        email_finish.finish_email,
        reputation.read_reputation, reputation.record_pause, reputation.probe_provider,
        sending_limits.admit_batch, sending_limits.split_refused_batch, account_quota.look_for_account_room,
        outbox_relay.relay_outbox,
        outbox_delivery.handle_entry, outbox_delivery.complete_entry, outbox_delivery.abort_entry,
        analytics.fetch_phase, analytics.aggregate_stats, analytics.record_run,
        posts.publish_post, posts.reconcile_posts,
        webhooks.apply_inbox,
        retention.fold_old_recipients,
        automations.advance_run, automations.send_step,
    ]


@asynccontextmanager
async def open_dependencies(settings: Settings, client: Client) -> AsyncIterator[Dependencies]:

    pool = await database.connect(settings.require_database(), max_size=20)
    provider = provider_from_settings(settings, pool)
    try:
        yield Dependencies(settings=settings, pool=pool, provider=provider, temporal=client)
    finally:
        await provider.aclose()
        await pool.close()


def build_worker(client: Client, deps: Dependencies, *, task_queue: str | None = None,
                 **options) -> Worker:
    return Worker(
        client,
        task_queue=task_queue or deps.settings.task_queue,
        workflows=WORKFLOWS,
        activities=build_activities(deps),
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
        max_concurrent_activities=deps.settings.worker_max_activities,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=deps.settings.worker_sticky_seconds),
        **options,
    )


def build_webhooks_worker(client: Client, deps: Dependencies, *, task_queue: str | None = None,
                          **options) -> Worker:
    """The worker of the site's webhook deliveries, on a task queue of their own: slow targets take
    its activity slots, never those of welcome emails or newsletters."""
    delivery = OutboxDeliveryActivities(deps)
    return Worker(
        client,
        task_queue=webhooks_task_queue(task_queue or deps.settings.task_queue),
        workflows=[DeliverOutboxEntryWorkflow],
        activities=[delivery.handle_entry, delivery.complete_entry, delivery.abort_entry],
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
        max_concurrent_activities=deps.settings.worker_max_activities,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=deps.settings.worker_sticky_seconds),
        **options,
    )


@asynccontextmanager
async def running_worker(client: Client, settings: Settings, **options) -> AsyncIterator[Worker]:
    """A worker (and the site's webhooks' worker) running in the background of the caller (tests, the demo)."""
    async with open_dependencies(settings, client) as deps, build_worker(client, deps, **options) as worker, \
            build_webhooks_worker(client, deps, **options):
        yield worker


def metrics_runtime(settings: Settings) -> Runtime | None:
    """With PRESSROOM_METRICS_PORT set, a runtime serving Prometheus metrics on /metrics there.

    The SDK's own metrics (task latencies, slots, failures) and Pressroom's (made with
    `activity.metric_meter()` / `workflow.metric_meter()`) share the endpoint, prefixed
    `temporal_` and `pressroom_` respectively.
    """
    if not settings.metrics_port:
        return None
    return Runtime(telemetry=telemetry(metrics=PrometheusConfig(
        bind_address=f"{settings.metrics_host}:{settings.metrics_port}", durations_as_seconds=True)))


async def run(settings: Settings | None = None) -> None:
    """Run until SIGINT or SIGTERM, then shut down gracefully."""

    settings = settings or get_settings()
    tune_garbage_collection()
    client = await connect(settings, runtime=metrics_runtime(settings))
    if settings.metrics_port:
        log.info("metrics on http://%s:%d/metrics", settings.metrics_host, settings.metrics_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with running_worker(client, settings):
        # The schedules exist, at current settings; one running on another task queue stays there.
        analytics, reconcile = analytics_schedule_id(settings), reconcile_schedule_id(settings)
        retention = retention_schedule_id(settings)
        for schedule_id, outcome in ((analytics, await ensure_analytics_schedule(client, settings)),
                                     (reconcile, await reconcile_at_worker_start(client, settings)),
                                     (retention, await ensure_retention_schedule(client, settings))):
            if outcome.startswith("left on"):
                log.warning("schedule %s %s, not moved to this worker's %s (`pressroom check` says whether a "
                            "worker polls it)", schedule_id, outcome, settings.task_queue)
        # Before the relay (and its watchdog) starts: rows under way whose runs Temporal lost (a restore
        # beside an empty Temporal) go back to their jobs rather than being recorded as failed.
        await restart_lost_runs(client, settings)
        await ensure_outbox_relay(client, settings)  # outbox: the relay runs
        await ensure_inbox_applier(client, settings)  # webhooks: pushed events are applied
        log.info("worker started on task queue %s", settings.task_queue)
        async with AsyncExitStack() as health:
            if settings.worker_health_port:
                await health.enter_async_context(serving_health(client, settings))
            await stop.wait()
        log.info("worker stopping: in-flight activities finish or are handed back")
    log.info("worker stopped")


def main() -> None:

    tracing_export.configure_from_environment()
    configure_logging(get_settings())
    try:
        asyncio.run(run())
    finally:
        close_runtime()  # join the runtime's threads before the interpreter shuts down (see starter)


def tune_garbage_collection() -> None:
    """Fewer collections for a process that builds many short-lived objects (a page of events is
    thousands of dicts): with the default threshold of 700 the collector took a fifth of an analytics
    fetch's CPU. A higher one keeps garbage in reference cycles a little longer (a send's peak memory
    grows by about 20 MB at 10,000, by 50 MB at 50,000). The modules and objects loaded so far are
    never collected, so the collections that remain do not walk them again."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def configure_logging(settings: Settings) -> None:
    """Structured lines that never carry a key or a member's address."""

    logs.configure_from(settings)


if __name__ == "__main__":
    main()

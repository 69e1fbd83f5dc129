"""Keeping scheduled posts' workflows in step with their rows: start or move a post's timer, stop it,
and reconcile them all."""

from __future__ import annotations

import asyncio
from datetime import datetime

import asyncpg
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.posts.models import (
    PUBLISH_WORKFLOW_PREFIX,
    PublishPostInput,
    ReconcileResult,
    RescheduleInput,
    publish_workflow_id,
)
from pressroom.settings import Settings
from pressroom.temporal import PUBLISH_AT


async def start_or_move_publication(client: Client, settings: Settings, post_id: str, publish_at: datetime) -> None:
    """Signal-with-start: the post's workflow starts, or the running one moves to the new time.

    The workflow is named by its registered name: activities (the reconcile) call this too, and
    activities do not import workflow code.
    """
    await client.start_workflow(
        "PublishPostWorkflow",
        PublishPostInput(post_id=post_id, publish_at=publish_at, lead_seconds=settings.publish_lead_seconds,
                         retries=settings.publish_retries, retry_seconds=settings.publish_retry_seconds,
                         heartbeat_seconds=settings.publish_heartbeat_seconds),
        id=publish_workflow_id(post_id), task_queue=settings.task_queue,
        start_signal="reschedule", start_signal_args=[RescheduleInput(publish_at=publish_at)],
        static_summary=f"Publish post {post_id} at its scheduled time")


async def stop_publication(client: Client, post_id: str) -> bool:
    """Tell the post's workflow it is unscheduled; False when no workflow runs for it."""

    try:
        await client.get_workflow_handle(publish_workflow_id(post_id)).signal("unschedule")
        return True
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return False
        raise


async def reconcile_scheduled_posts(client: Client, pool: asyncpg.Pool, settings: Settings, *,
                                    concurrency: int = 20) -> ReconcileResult:
    """Start or move a workflow for every scheduled post whose timer is missing or at another time;
    stop those whose post is not scheduled.

    A post whose timer is already right gets no signal: a year-long timer reconciled every 10
    minutes must not fill its history.
    """

    running: dict[str, datetime | None] = {}
    async for execution in client.list_workflows(
            "WorkflowType = 'PublishPostWorkflow' AND ExecutionStatus = 'Running'"):
        running[execution.id.removeprefix(PUBLISH_WORKFLOW_PREFIX)] = execution.typed_search_attributes.get(PUBLISH_AT)
    scheduled = {row["id"]: row["published_at"] for row in await pool.fetch(
        "SELECT id, published_at FROM posts WHERE status = 'scheduled'")}

    def timer_is_right(post_id: str, at: datetime) -> bool:
        timer = running.get(post_id)
        return timer is not None and abs((timer - at).total_seconds()) < 0.001

    slots = asyncio.Semaphore(concurrency)

    async def start(post_id: str, publish_at: datetime) -> None:
        async with slots:
            await start_or_move_publication(client, settings, post_id, publish_at)

    moved = {post_id: at for post_id, at in scheduled.items() if not timer_is_right(post_id, at)}
    await asyncio.gather(*(start(post_id, at) for post_id, at in moved.items()))
    # Read the rows again: a post scheduled since the first read is not a stray.
    candidates = [post_id for post_id in running if post_id not in scheduled]
    still = {row["id"] for row in await pool.fetch(
        "SELECT id FROM posts WHERE id = ANY($1::text[]) AND status = 'scheduled'", candidates)}
    stray = [post_id for post_id in candidates if post_id not in still]
    for post_id in stray:
        await stop_publication(client, post_id)
    return ReconcileResult(started_or_moved=len(moved), stopped=len(stray))

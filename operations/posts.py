"""Scheduled posts, client side: schedule, unschedule and reconcile; the periodic reconcile's schedule."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    WorkflowExecutionStatus,
)
from temporalio.service import RPCError, RPCStatusCode

from activities.outbox import site_events
from activities.posts.models import publish_workflow_id
from activities.posts.publish import NEWSLETTER_NOT_GOING
from activities.posts.schedule import reconcile_scheduled_posts, start_or_move_publication, stop_publication
from operations.common import run_summary, temporal_client
from pressroom import database, tracing
from pressroom.errors import BadInput, NotFound, PressroomError
from pressroom.inputs import entity_id, publish_time
from pressroom.settings import Settings, get_settings
from pressroom.temporal import (
    PUBLISH_AT,
    adopt_legacy_schedule,
    create_or_update_schedule,
    describe_rpc_error,
    site_schedule_id,
)

if TYPE_CHECKING:
    import asyncpg


@tracing.traced("pressroom posts schedule", "post_id")
async def schedule_post(post_id: str, at: str, *, client=None, settings: Settings | None = None):
    """Mark the post scheduled for `at` and start or move its workflow, both or neither; a past time
    publishes at once."""
    entity_id(post_id, "post")
    publish_at = publish_time(at)
    settings = settings or get_settings()
    await change_post(post_id, publish_at, client or await temporal_client(settings), settings)
    return publish_at


async def unschedule_post(post_id: str, *, client=None, settings: Settings | None = None) -> None:
    """Back to draft, and the post's workflow ends without publishing; both or neither."""
    entity_id(post_id, "post")
    settings = settings or get_settings()
    await change_post(post_id, None, client or await temporal_client(settings), settings)


async def change_post(post_id: str, publish_at, client, settings: Settings, write=None, *,
                      at_once: bool = False, pool: asyncpg.Pool | None = None) -> None:
    """Schedule the post for `publish_at` (None: back to draft) and tell its workflow, as one change;
    `write(conn)`, when given, writes the rest of the change (operations/authoring.py) in the same
    transaction, after the checks. `at_once`: published now, not scheduled (its timer fires at
    once): no schedule event, and `post.published` will say the status it had (published_from).

    The row is updated in a transaction and the workflow told before it commits: a refused call
    rolls the row back. Should the commit fail once the workflow was told, the workflow is put
    back as the row still is. Either way the error says what happened, in one line.
    """
    async with database.connection(settings.require_database(), pool) as conn:
        transaction = conn.transaction()
        await transaction.start()
        try:
            before = await conn.fetchrow("SELECT status, published_at FROM posts WHERE id = $1 FOR UPDATE", post_id)
            if before is None:
                raise NotFound(f"post {post_id} does not exist")
            if publish_at is None and before["status"] != "scheduled":
                raise BadInput(f"post {post_id} is {before['status']}, not scheduled")
            if publish_at is not None and before["status"] not in ("draft", "scheduled"):
                raise BadInput(f"post {post_id} is already {before['status']}; only a draft or scheduled post can "
                               "be scheduled")
            previous = await site_events.before(conn, site_events.SCHEDULE_EVENTS, post_id, settings.site_url)
            if write is not None:
                await write(conn)
            await conn.execute("UPDATE posts SET status = $2, published_at = coalesce($3, published_at), "
                               "published_from = $4, updated_at = now() WHERE id = $1", post_id,
                               "draft" if publish_at is None else "scheduled", publish_at,
                               before["status"] if at_once else None)
            if not at_once:
                await site_events.emit_schedule_change(conn, post_id, before, publish_at, previous,
                                                       settings.site_url)
            try:
                await tell_post_workflow(client, settings, post_id, publish_at)
            except RPCError as error:
                raise PressroomError(f"post {post_id} was not changed (it is still {before['status']}): "
                                     f"{describe_rpc_error(error, settings)}") from None
        except BaseException:
            with contextlib.suppress(Exception):  # the connection is gone, and the server rolled back with it
                await transaction.rollback()
            raise
        try:
            await transaction.commit()
        except Exception as error:  # noqa: BLE001 (whatever stopped the commit, the workflow is put back)
            back = before["published_at"] if before["status"] == "scheduled" else None
            try:
                await tell_post_workflow(client, settings, post_id, back)
                repair = "its workflow was put back"
            except Exception:  # noqa: BLE001 (the repair's failure is reported in the error below)
                repair = "its workflow could not be put back: run `pressroom posts reconcile`"
            raise PressroomError(f"post {post_id} was not changed (it is still {before['status']}): the database "
                                 f"did not commit ({type(error).__name__}: {error}); {repair}") from None


async def tell_post_workflow(client, settings: Settings, post_id: str, publish_at) -> None:
    """Start or move the post's workflow to `publish_at`, or stop it (None)."""
    if publish_at is None:
        await stop_publication(client, post_id)
    else:
        await start_or_move_publication(client, settings, post_id, publish_at)


async def reconcile_posts(*, client=None, settings: Settings | None = None):
    settings = settings or get_settings()
    pool = await database.connect(settings.require_database(), max_size=2)
    try:
        return await reconcile_scheduled_posts(client or await temporal_client(settings), pool, settings)
    finally:
        await pool.close()


RECONCILE_SCHEDULE_ID = "posts-reconcile"  # the default task queue's (site_schedule_id)
RECONCILE_EVERY = timedelta(minutes=10)


def reconcile_schedule_id(settings: Settings) -> str:
    return site_schedule_id(RECONCILE_SCHEDULE_ID, settings.task_queue)


async def ensure_reconcile_schedule(client, settings) -> str:
    """The periodic reconcile (catches posts scheduled by other writers of the database)."""
    schedule_id = reconcile_schedule_id(settings)
    schedule = Schedule(
        action=ScheduleActionStartWorkflow("ReconcilePostsWorkflow", id=schedule_id,
                                           task_queue=settings.task_queue),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=RECONCILE_EVERY)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP))
    # A worker on another task queue leaves it where it runs (create_or_update_schedule).
    outcome = await create_or_update_schedule(client, schedule_id, schedule, move=False)
    await adopt_legacy_schedule(client, RECONCILE_SCHEDULE_ID, schedule_id, settings.task_queue)
    return outcome


async def reconcile_at_worker_start(client, settings) -> str:
    """Ensure the schedule and run it once now: posts scheduled while no worker ran get their timers.
    Answers what became of the schedule (created, updated, left on its own task queue)."""
    outcome = await ensure_reconcile_schedule(client, settings)
    await client.get_schedule_handle(reconcile_schedule_id(settings)).trigger()
    return outcome


async def posts_status(post_id: str | None = None, *, client=None, settings: Settings | None = None) -> dict:
    """Without a post: counts by state, the next posts due and how many are overdue. With one: its
    row and its workflow, with the time its timer waits for."""
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        if post_id is None:
            counts = {r["status"]: r["n"] for r in await conn.fetch(
                "SELECT status, count(*) AS n FROM posts GROUP BY status ORDER BY status")}
            upcoming = await conn.fetch("SELECT id, published_at FROM posts WHERE status = 'scheduled' "
                                        "ORDER BY published_at LIMIT 10")
            overdue = await conn.fetchval("SELECT count(*) FROM posts WHERE status = 'scheduled' "
                                          "AND published_at < now()")
            not_going = await conn.fetch(
                f"SELECT p.id, {NEWSLETTER_NOT_GOING} AS why FROM posts p LEFT JOIN emails e ON e.post_id = p.id "
                f"WHERE p.status IN ('published', 'sent') AND p.newsletter_id IS NOT NULL "
                f"AND {NEWSLETTER_NOT_GOING} IS NOT NULL ORDER BY p.publish_completed_at DESC NULLS LAST LIMIT 10")
            return {"counts": counts, "overdue": overdue,
                    "next": [{"post_id": r["id"], "publish_at": r["published_at"]} for r in upcoming],
                    "newsletter_not_going": [{"post_id": r["id"], "why": r["why"]} for r in not_going]}
        post = await conn.fetchrow(
            f"SELECT p.status, p.published_at, p.publish_completed_at, e.id AS email_id, e.status AS email_status, "
            f"{NEWSLETTER_NOT_GOING} AS not_going FROM posts p LEFT JOIN emails e ON e.post_id = p.id "
            f"WHERE p.id = $1", post_id)
    if post is None:
        raise NotFound(f"post {post_id} does not exist")
    client = client or await temporal_client(settings)
    workflow_id, run = publish_workflow_id(post_id), None
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
        # The time its timer waits for, as the run last recorded it (no worker needed to read it).
        run = {**await run_summary(client, description),
               "timer_at": description.typed_search_attributes.get(PUBLISH_AT)
               if description.status == WorkflowExecutionStatus.RUNNING else None}
    except RPCError as error:
        if error.status != RPCStatusCode.NOT_FOUND:
            raise
    return {"post_id": post_id, "status": post["status"], "publish_at": post["published_at"],
            "published_at": post["publish_completed_at"], "workflow_id": workflow_id, "run": run,
            "email": {"email_id": post["email_id"], "status": post["email_status"],
                      "will_not_go_out": post["not_going"]} if post["email_id"] or post["not_going"] else None}

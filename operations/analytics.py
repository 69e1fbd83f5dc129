"""Email analytics, client side: the `email-analytics` schedule, backfill requests, and the status."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
)
from temporalio.service import RPCError, RPCStatusCode

from activities.analytics.models import BACKFILL_PREFIX, PHASE_JOBS, RUNS_JOB, SCHEDULE_ID, FetchEmailAnalyticsInput
from operations.common import temporal_client
from operations.waiting import watching_for_worker
from pressroom import database
from pressroom.errors import BadInput, NotFound, PressroomError, shorten
from pressroom.inputs import past_time
from pressroom.logs import ADDRESS
from pressroom.settings import Settings, get_settings
from pressroom.temporal import adopt_legacy_schedule, create_or_update_schedule, site_schedule_id
from workflows.analytics import FetchEmailAnalyticsWorkflow

if TYPE_CHECKING:
    from temporalio.client import Client


def analytics_schedule_id(settings: Settings) -> str:
    """This site's analytics schedule: `email-analytics` on the default task queue (site_schedule_id)."""
    return site_schedule_id(SCHEDULE_ID, settings.task_queue)


def build_schedule(settings: Settings):
    interval = timedelta(seconds=settings.analytics_interval_seconds)
    return Schedule(
        action=ScheduleActionStartWorkflow("FetchEmailAnalyticsWorkflow", FetchEmailAnalyticsInput(),
                                           id=analytics_schedule_id(settings), task_queue=settings.task_queue),
        # Jitter spreads the runs of many installations: no spike on the minute.
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=interval)], jitter=min(interval / 5,
                                                                                         timedelta(minutes=1))),
        # Overlap SKIP: a run never starts while the last one still runs; a short catch-up window avoids a
        # burst of runs after an outage (each run reads from its cursors anyway).
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP, catchup_window=max(interval, timedelta(minutes=1))),
    )


async def ensure_schedule(client: Client, settings: Settings, *, move: bool = False) -> str:
    """Create the schedule, or update it to the current settings keeping its paused state; one on
    another task queue is left there unless `move` (create_or_update_schedule)."""
    schedule_id = analytics_schedule_id(settings)
    outcome = await create_or_update_schedule(client, schedule_id, build_schedule(settings), move=move)
    await adopt_legacy_schedule(client, SCHEDULE_ID, schedule_id, settings.task_queue)
    return outcome


async def analytics_schedule(settings: Settings | None = None, client=None) -> str:
    """Create or update this site's analytics schedule (analytics_schedule_id), onto this task queue (the
    operator's explicit word moves it); answers "created" or "updated"."""
    settings = settings or get_settings()
    return await ensure_schedule(client or await temporal_client(settings), settings, move=True)


async def _analytics_handle(settings: Settings | None, client):
    settings = settings or get_settings()
    client = client or await temporal_client(settings)
    schedule_id = analytics_schedule_id(settings)
    handle = client.get_schedule_handle(schedule_id)
    try:
        return handle, await handle.describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise NotFound(f"schedule {schedule_id} does not exist (create it with `pressroom analytics schedule`)") \
                from None
        raise


async def analytics_trigger(settings: Settings | None = None, client=None) -> None:
    """Start one run now (skipped by the overlap policy if one is running)."""
    handle, _ = await _analytics_handle(settings, client)
    await handle.trigger()


async def analytics_run(*, wait: bool, settings: Settings | None = None, client=None, say=lambda message: None):
    """Trigger one run; with `wait`, follow it (or the run already going, which the overlap policy
    keeps alone) to its end and answer its result, saying when no worker polls its task queue."""
    settings = settings or get_settings()
    client = client or await temporal_client(settings)
    handle, before = await _analytics_handle(settings, client)
    seen = {a.action.workflow_id for a in before.info.recent_actions}
    await handle.trigger()
    if not wait:
        return None
    for _ in range(100):  # the schedule records the triggered (or the still running) run within moments
        description = await handle.describe()
        running = [a.workflow_id for a in description.info.running_actions]
        fresh = [a.action.workflow_id for a in description.info.recent_actions if a.action.workflow_id not in seen]
        if fresh or running:
            workflow_id = (fresh or running)[-1]
            break
        await asyncio.sleep(0.1)
    else:
        raise PressroomError(f"schedule {handle.id} took no action on the trigger")
    say(f"following {workflow_id}" + ("" if fresh else " (a run was already going; the trigger was skipped)"))
    run = client.get_workflow_handle_for(FetchEmailAnalyticsWorkflow.run, workflow_id)
    description = await run.describe()
    if description.status is not None and description.status.name != "RUNNING":
        return await run.result()  # closed: its result is in its history, no worker needed
    async with watching_for_worker(client, description.task_queue, say, workflow_id=workflow_id):
        return await run.result()


async def analytics_pause(paused: bool, settings: Settings | None = None, client=None) -> None:
    handle, _ = await _analytics_handle(settings, client)
    if paused:
        await handle.pause(note="paused with pressroom analytics pause")
    else:
        await handle.unpause(note="unpaused with pressroom analytics unpause")


async def analytics_backfill(begin: str, end: str, settings: Settings | None = None) -> str:
    """Record a backfill request that the next run reads; answers its job name."""
    # A window in the future has no events yet: the run would mark it finished, empty.
    start, stop = past_time(begin, "--from"), past_time(end, "--to")
    if start >= stop:
        raise BadInput(f"--from {shorten(begin)!r} must come before --to {shorten(end)!r}")
    settings = settings or get_settings()
    name = f"{BACKFILL_PREFIX}{uuid.uuid4().hex[:12]}"
    pool = await database.connect(settings.require_database(), max_size=1)
    try:
        await pool.execute("INSERT INTO jobs (name, status, metadata) VALUES ($1, 'queued', $2::jsonb)", name,
                           json.dumps({"begin": start.timestamp(), "end": stop.timestamp()}))
    finally:
        await pool.close()
    return name


async def analytics_status(settings: Settings | None = None, client=None) -> dict:
    """The schedule's state, its recent actions, each cursor with its lag, and the last runs."""
    settings = settings or get_settings()
    now = datetime.now(UTC)
    try:
        _, description = await _analytics_handle(settings, client)
    except NotFound:
        # Right after the demo or before any worker started: no schedule yet, which is said, not failed on.
        status: dict[str, Any] = {"exists": False, "paused": None, "note": "", "next": [], "recent": [], "running": []}
    else:
        state = description.schedule.state
        status = {"exists": True, "paused": state.paused, "note": state.note or "",
                  # A paused schedule takes no action, whatever times its spec would give.
                  "next": [] if state.paused else [t.isoformat() for t in description.info.next_action_times[:3]],
                  "recent": [{"at": a.started_at.isoformat(), "workflow_id": a.action.workflow_id}
                             for a in description.info.recent_actions[-5:]],
                  "running": [a.workflow_id for a in description.info.running_actions]}
    status.update({"schedule_id": analytics_schedule_id(settings), "cursors": {}, "runs": [], "backfills": []})
    pool = await database.connect(settings.require_database(), max_size=1)
    try:
        status["rejected"] = await _rejected_counts(pool)
        for row in await pool.fetch("SELECT name, status, metadata FROM jobs WHERE name LIKE 'email-analytics%'"
                                    " ORDER BY name"):
            metadata = json.loads(row["metadata"])
            if row["name"] == RUNS_JOB:
                status["runs"] = metadata.get("runs", [])
            elif row["name"] in PHASE_JOBS.values():
                cursor = metadata.get("cursor")
                status["cursors"][row["name"]] = {
                    "cursor": datetime.fromtimestamp(cursor, UTC).isoformat() if cursor else None,
                    "lag_seconds": round(now.timestamp() - cursor, 1) if cursor else None,
                    # A cursor's row stays `started` for good: whether a run moves it now is the schedule's to say.
                    "status": "fetching" if status["running"] else "idle"}
            if "begin" in metadata:
                status["backfills"].append({"name": row["name"], "status": row["status"]})
    finally:
        await pool.close()
    return status


async def _rejected_counts(pool) -> dict:
    rows = await pool.fetch("SELECT reason, count(*) AS n, max(rejected_at) AS last_at FROM delivery_events_rejected "
                            "GROUP BY reason ORDER BY n DESC, reason")
    return {"total": sum(r["n"] for r in rows), "by_reason": {r["reason"]: r["n"] for r in rows},
            "last_at": max((r["last_at"] for r in rows), default=None)}


async def rejected_events(settings: Settings | None = None, limit: int = 50) -> dict:
    """The delivery events set aside, newest first: when, from where, the event's id and why; never
    the event itself (it holds an address: read it in the database, `delivery_events_rejected.event`)."""
    settings = settings or get_settings()
    pool = await database.connect(settings.require_database(), max_size=1)
    try:
        counts = await _rejected_counts(pool)
        rows = await pool.fetch("SELECT id, rejected_at, provider, source, event_id, reason "
                                "FROM delivery_events_rejected ORDER BY id DESC LIMIT $1", limit)
    finally:
        await pool.close()
    # An event id is the provider's text, checked but not trusted: masked where it looks like an address.
    return {**counts, "events": [{**dict(r), "event_id": ADDRESS.sub("<address>", r["event_id"]) if r["event_id"]
                                  else None} for r in rows]}

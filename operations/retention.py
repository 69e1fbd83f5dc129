"""Retention, client side: the `recipient-retention` schedule, a run now, and what is kept
(docs/production.md "Retention")."""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
)

from activities.retention import RetentionInput, RetentionResult, fold_due
from pressroom import database
from pressroom.errors import BadInput
from pressroom.settings import MIN_RETENTION_DAYS, Settings, get_settings
from pressroom.store.retention import DUE_EMAILS, STATUS
from pressroom.temporal import create_or_update_schedule, site_schedule_id
from workflows.retention import RecipientRetentionWorkflow

RETENTION_SCHEDULE_ID = "recipient-retention"  # the default task queue's (site_schedule_id)
RETENTION_EVERY = timedelta(hours=6)
COUNTED_AT_MOST = 100_000  # emails due, counted by `retention status`


def retention_schedule_id(settings: Settings) -> str:
    return site_schedule_id(RETENTION_SCHEDULE_ID, settings.task_queue)


async def ensure_retention_schedule(client, settings: Settings) -> str:
    """The schedule that folds old recipient rows every RETENTION_EVERY, overlaps skipped; one running
    on another task queue is left there."""
    schedule_id = retention_schedule_id(settings)
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(RecipientRetentionWorkflow.run, RetentionInput(), id=schedule_id,
                                           task_queue=settings.task_queue),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=RETENTION_EVERY)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP))
    return await create_or_update_schedule(client, schedule_id, schedule, move=False)


async def run_retention(days: int | None = None, *, settings: Settings | None = None) -> RetentionResult:
    """Fold and drop now, in this process, as the schedule's run does (`days` instead of the setting)."""
    settings = settings or get_settings()
    if days is not None and 0 < days < MIN_RETENTION_DAYS:
        raise BadInput(f"--days {days} is below {MIN_RETENTION_DAYS}: the last 30 days' rates "
                       "(`pressroom check`) read the recipient rows")
    pool = await database.connect(settings.require_database(), max_size=2)
    try:
        return await fold_due(pool, settings.recipient_retention_days if days is None else days,
                              settings.retention_chunk_rows)
    finally:
        await pool.close()


async def retention_status(*, settings: Settings | None = None) -> dict:
    """The retention period, the emails folded, and the recipient rows and bytes that remain."""
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        row = dict(await conn.fetchrow(STATUS))
        due = await conn.fetchval(f"SELECT count(*) FROM ({DUE_EMAILS}) due", settings.recipient_retention_days,
                                  COUNTED_AT_MOST) if settings.recipient_retention_days > 0 else 0
    return {"retention_days": settings.recipient_retention_days, "emails_due": due, **row}

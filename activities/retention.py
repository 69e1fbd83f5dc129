"""Retention: recipient rows of emails older than the retention period folded and dropped (the
`recipient-retention` schedule, and `pressroom retention run`); pressroom/store/retention.py says how."""

from __future__ import annotations

import asyncpg
from pydantic import BaseModel
from temporalio import activity

from activities.heartbeat import heartbeating
from activities.report_figures import row_figures
from pressroom.dependencies import Dependencies
from pressroom.store.retention import DUE_EMAILS, FOLD_CHUNK, MARK_DROPPED, RECORD_FIGURES, figures_json

EMAILS_PER_RUN = 1000  # a run's share; the next run goes on with the rest


class RetentionInput(BaseModel):
    retention_days: int | None = None  # None: the worker's PRESSROOM_RECIPIENT_RETENTION_DAYS


class RetentionResult(BaseModel):
    emails_folded: int = 0
    rows_dropped: int = 0
    chunks: int = 0
    retention_days: int = 0  # 0: kept for ever, nothing folded


async def fold_one(pool: asyncpg.Pool, email_id: str, chunk_rows: int) -> tuple[int, int]:
    """The email's report figures recorded, then its rows folded and dropped a chunk at a time:
    (rows dropped, chunks). Safe to repeat: figures are recorded once, a chunk folds and drops together."""
    async with pool.acquire() as conn:
        figures = await row_figures(conn, email_id)
        segments, left_out, opens = figures_json(figures)
        await conn.execute(RECORD_FIGURES, email_id, figures["recipients"], figures["not_sent"],
                           figures["unsubscribed"], segments, left_out, opens)
        track_opens = bool(await conn.fetchval("SELECT track_opens FROM emails WHERE id = $1", email_id))
    dropped = chunks = 0
    while taken := await pool.fetchval(FOLD_CHUNK, email_id, chunk_rows, track_opens):
        dropped, chunks = dropped + taken, chunks + 1
    await pool.execute(MARK_DROPPED, email_id)
    return dropped, chunks


async def fold_due(pool: asyncpg.Pool, retention_days: int, chunk_rows: int) -> RetentionResult:
    """Every email due (up to EMAILS_PER_RUN), oldest first."""
    if retention_days <= 0:
        return RetentionResult()
    result = RetentionResult(retention_days=retention_days)
    for row in await pool.fetch(DUE_EMAILS, retention_days, EMAILS_PER_RUN):
        dropped, chunks = await fold_one(pool, row["id"], chunk_rows)
        result = result.model_copy(update={"emails_folded": result.emails_folded + 1,
                                           "rows_dropped": result.rows_dropped + dropped,
                                           "chunks": result.chunks + chunks})
    return result


class RetentionActivities:
    def __init__(self, deps: Dependencies) -> None:
        self.pool = deps.pool
        self.settings = deps.settings

    @activity.defn
    async def fold_old_recipients(self, input: RetentionInput) -> RetentionResult:
        """Fold and drop the recipient rows of every email older than the retention period. Safe to
        repeat: an email's figures are recorded once and each chunk folds and drops in one statement."""
        days = self.settings.recipient_retention_days if input.retention_days is None else input.retention_days
        async with heartbeating():
            result = await fold_due(self.pool, days, self.settings.retention_chunk_rows)
        activity.logger.info("retention: %d emails folded, %d recipient rows dropped in %d chunks",
                             result.emails_folded, result.rows_dropped, result.chunks)
        return result

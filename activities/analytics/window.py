"""One window of a phase: read page by page, applied batch by batch, the cursor moved with each batch."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from datetime import datetime
from typing import Any

import asyncpg
from temporalio import activity

from activities.analytics.models import PhaseResult, epoch, moment
from activities.delivery_events.apply import apply_batch
from pressroom.providers.port import EmailProvider, EventQuery, ProviderError
from pressroom.store.events import EventBatch

APPLY_EVENTS = 3000  # events applied per transaction (10 pages)

_SAVE_JOB = """
INSERT INTO jobs (name, status, started_at, metadata) VALUES ($1, 'started', now(), $2::jsonb)
ON CONFLICT (name) DO UPDATE SET metadata = jobs.metadata || EXCLUDED.metadata, updated_at = now()"""


def resume_point(job: str, phase: str, state: dict[str, Any], end: datetime,
                 ) -> tuple[PhaseResult, str | None, datetime, dict[str, Any] | None]:
    """Where the window's reading starts: a retry resumes from its last heartbeat (with the figures
    it had), a run after a capped run from its saved page, any other at the window's first page."""
    details = activity.info().heartbeat_details
    resumed = details[0] if details and isinstance(details[0], dict) and details[0].get("job") == job else None
    if resumed:
        return PhaseResult.model_validate(resumed["result"]), resumed["url"], moment(resumed["end"]), resumed
    if state.get("resume_url") and state.get("window_end"):
        return PhaseResult(phase=phase), state["resume_url"], moment(state["window_end"]), None
    return PhaseResult(phase=phase), None, end, None


async def read_and_apply(pool: asyncpg.Pool, provider: EmailProvider, query: EventQuery, page: str | None,
                         cap: int | None, job: str, state: dict[str, Any], checkpoint: dict[str, Any] | None,
                         result: PhaseResult) -> None:
    """Page through the window, a batch of pages applied (with the cursor) while the next pages
    are read and parsed: PostgreSQL and this process work at the same time. One batch at a
    time, in order, so the cursor only moves forward."""
    batch, last_moment, exhausted = EventBatch(), None, False
    pending: asyncio.Task | None = asyncio.create_task(provider.read_events(page, query))
    applying: asyncio.Task | None = None
    try:
        while pending is not None:
            events = await pending
            pending = None
            result.pages += 1
            if applying is not None and applying.done():
                checkpoint, applying = applying.result(), None
            # Every page is a sign of life; the details stay those of the last batch applied,
            # where a retry can resume without skipping an event (None before the first).
            activity.heartbeat(checkpoint)
            result.events += len(events.items)
            if events.items:
                last_moment = events.last_timestamp if events.last_timestamp is not None else last_moment
                batch.add(events.items, provider.parse_event)
            full = len(events.items) >= query.limit and events.next_page is not None
            room = cap is None or result.events + query.limit <= cap
            if full and room:
                pending = asyncio.create_task(provider.read_events(events.next_page, query))  # read while we apply
            else:
                exhausted = not full
                result.capped = full and not room
            if len(batch) + batch.malformed >= APPLY_EVENTS or pending is None:
                if applying is not None:
                    checkpoint = await applying
                applying = asyncio.create_task(_apply_and_checkpoint(
                    pool, batch, result, job, _cursor(query, events.next_page, exhausted, last_moment, state),
                    {"job": job, "url": events.next_page, "end": _window_end(query)}, result.pages, result.events))
                batch = EventBatch()
        if applying is not None:
            await applying
    except ProviderError:
        if applying is not None:
            await applying  # keep the batch read before the failure: a retry resumes after it
        raise
    finally:
        for task in (pending, applying):
            if task is not None and not task.done():
                task.cancel()


def _window_end(query: EventQuery) -> float:
    """A window's query always has its end (the phase's, or the backfill's)."""
    assert query.end is not None
    return epoch(query.end)


def _cursor(query: EventQuery, next_page: str | None, exhausted: bool, last_moment: float | None,
            state: dict[str, Any]) -> dict[str, Any]:
    """Where the phase stands once a batch is applied: the window's end when it is read to the end,
    else the last event's time and the page to resume from (keys as stored since 0.1.0)."""
    end = _window_end(query)
    return {"resume_url": None if exhausted else next_page, "window_end": end,
            "cursor": end if exhausted else (last_moment or state.get("cursor"))}


async def _apply_and_checkpoint(pool: asyncpg.Pool, batch: EventBatch, result: PhaseResult, job: str,
                                cursor: dict[str, Any], resume: dict[str, Any], pages: int, events: int,
                                ) -> dict[str, Any]:
    """Apply a batch, then heartbeat where a retry resumes: the page after this batch, with the
    figures as they were when the batch was cut (pages read since are not applied yet)."""
    await apply(pool, batch, result, job, cursor)
    checkpoint = {**resume, "result": result.model_dump(mode="json") | {"pages": pages, "events": events}}
    activity.heartbeat(checkpoint)
    return checkpoint


async def apply(pool: asyncpg.Pool, batch: EventBatch, result: PhaseResult, job: str, cursor: dict[str, Any],
                ) -> None:
    """One transaction: the events (times, failures, unsubscribes, complaints, suppressions), the
    events set aside, and the cursor."""
    async def save_cursor(conn: asyncpg.Connection) -> None:
        await conn.execute(_SAVE_JOB, job, json.dumps(cursor))

    applied = await apply_batch(pool, batch, "poll", save_cursor)
    result.applied += applied.matched
    result.unknown += applied.unknown
    result.malformed += applied.rejected
    result.by_type = dict(Counter(result.by_type) + batch.by_type)

"""Email analytics: page the email provider's events into email_recipients, then aggregate.

Each phase (latest opened, latest others, missing, backfills) keeps its own cursor in the jobs
table. A phase reads its window page by page and applies a batch of pages in one transaction that
also moves its cursor (the times and dirty marks in one statement; failures, unsubscribes and
complaints, when the batch has any, in a few more), while it reads the next pages; after each batch
it heartbeats the next page's URL, so a retry continues from the last batch applied. Applying is
idempotent: a time is set only when still empty, failures are one row per recipient, complaints by
(email, member), suppressions by address.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field
from temporalio import activity

from activities.delivery_events import EventBatch, aggregate, apply_batch
from activities.heartbeat import heartbeating
from activities.metrics import Instruments
from activities.provider_errors import activity_error
from pressroom.providers.port import EmailProvider, EventName, EventQuery, ProviderError

if TYPE_CHECKING:
    from temporalio.client import Client

    from pressroom.dependencies import Dependencies
    from pressroom.settings import Settings

SCHEDULE_ID = "email-analytics"
RUNS_JOB = "email-analytics"
BACKFILL_PREFIX = "email-analytics-backfill-"
PHASE_JOBS = {"latest-opened": "email-analytics-latest-opened", "latest": "email-analytics-latest",
              "missing": "email-analytics-missing"}
# Each phase asks only for the events it applies (the reference's filter); missing and backfill read
# every kind that is applied, and never the `accepted` events that make up a third of a send's.
APPLIED_EVENTS: tuple[EventName, ...] = ("delivered", "opened", "failed", "unsubscribed", "complained")
PHASE_EVENTS: dict[str, tuple[EventName, ...]] = {
    "latest-opened": ("opened",), "latest": ("delivered", "failed", "unsubscribed", "complained"),
    "missing": APPLIED_EVENTS, "backfill": APPLIED_EVENTS}
FIRST_LOOKBACK = timedelta(hours=24)  # where a phase with no cursor yet starts
APPLY_EVENTS = 3000  # events applied per transaction (10 pages)
RUNS_KEPT = 20


# --- models ------------------------------------------------------------------------------------

class FetchEmailAnalyticsInput(BaseModel):
    """`now` pins the run's clock (tests pin it to the simulator's); by default workflow.now()."""

    now: datetime | None = None
    restarts: int = Field(default=0, ge=0)  # how many times the opened cap restarted this chain


class FetchPhaseInput(BaseModel):
    phase: Literal["latest-opened", "latest", "missing", "backfill"]
    now: datetime


class PhaseResult(BaseModel):
    phase: str
    events: int = 0  # read from the provider
    applied: int = 0  # matched to a recipient and applied
    unknown: int = 0  # for an email or recipient we do not know
    malformed: int = 0  # set aside with their reason (delivery_events_rejected): unusable, never applied
    by_type: dict[str, int] = {}
    pages: int = 0
    seconds: float = 0.0
    capped: bool = False
    cursor: datetime | None = None
    lag_seconds: float | None = None

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


class AggregateInput(BaseModel):
    reason: str = "run"


class AggregateResult(BaseModel):
    emails: int = 0
    members: int = 0
    seconds: float = 0.0


class FetchEmailAnalyticsResult(BaseModel):
    started_at: datetime
    now: datetime
    phases: list[PhaseResult] = []
    aggregate: AggregateResult | None = None
    capped: bool = False
    error: str | None = None

    @property
    def events(self) -> int:
        return sum(p.events for p in self.phases)

    def by_type(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for phase in self.phases:
            total.update(phase.by_type)
        return dict(total)


class RecordRunInput(BaseModel):
    result: FetchEmailAnalyticsResult


_SAVE_JOB = """
INSERT INTO jobs (name, status, started_at, metadata) VALUES ($1, 'started', now(), $2::jsonb)
ON CONFLICT (name) DO UPDATE SET metadata = jobs.metadata || EXCLUDED.metadata, updated_at = now()"""

def _epoch(moment: datetime) -> float:
    return moment.timestamp()


def _moment(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, tz=timezone.utc)


def _add(total: PhaseResult, part: PhaseResult) -> None:
    """Add one window's figures to a phase's."""
    total.events += part.events
    total.applied += part.applied
    total.unknown += part.unknown
    total.malformed += part.malformed
    total.pages += part.pages
    total.seconds += part.seconds
    total.by_type = dict(Counter(total.by_type) + Counter(part.by_type))


class AnalyticsActivities:
    def __init__(self, deps: Dependencies) -> None:
        self.deps = deps
        self.metrics = Instruments()

    @property
    def _settings(self) -> Settings:
        return self.deps.settings

    # --- fetching ---

    @activity.defn
    async def fetch_phase(self, input: FetchPhaseInput) -> PhaseResult:
        """Read one phase's window and apply it; safe to rerun: applying an event twice changes nothing.

        With domain warming, the fallback scope's events are read too, with cursors of their own
        (named `{scope}:{job}`).
        """
        if input.phase == "backfill":
            return await self._fetch_backfills(input)
        result = await self._fetch_latest(PHASE_JOBS[input.phase], input)
        for scope in self._fallback_scopes():
            part = await self._fetch_latest(f"{scope}:{PHASE_JOBS[input.phase]}", input,
                                            self.deps.provider.for_scope(scope))
            _add(result, part)
            result.capped = result.capped or part.capped
        return result

    def _fallback_scopes(self) -> list[str]:
        return [self._settings.fallback_domain] if self._settings.fallback_domain else []

    async def _fetch_latest(self, job: str, input: FetchPhaseInput, provider: EmailProvider | None = None,
                            ) -> PhaseResult:
        settings = self._settings
        state = await self._job_metadata(job)
        if input.phase == "missing":
            end = input.now - timedelta(seconds=settings.analytics_trust_threshold_seconds)
            # The first missing window is empty: the latest phases have just read everything visible.
            begin = _moment(state.get("cursor")) or end
        else:
            end = input.now - timedelta(seconds=settings.analytics_end_margin_seconds)
            begin = _moment(state.get("cursor")) or (end - FIRST_LOOKBACK)
        cap = settings.analytics_max_opened_events if input.phase == "latest-opened" else None
        return await self._fetch_window(job, input.phase, begin, end, cap, state, input.now, provider)

    async def _fetch_backfills(self, input: FetchPhaseInput) -> PhaseResult:
        """Every queued backfill request, oldest first, each to the end of its range."""
        total = PhaseResult(phase="backfill")
        rows = await self.deps.pool.fetch(
            "SELECT name, metadata FROM jobs WHERE name LIKE $1 AND status IN ('queued', 'started') "
            "ORDER BY created_at, name", BACKFILL_PREFIX + "%")
        for row in rows:
            state = json.loads(row["metadata"])
            begin = _moment(state.get("cursor")) or _moment(state["begin"])
            end = _moment(state["end"])
            _add(total, await self._fetch_window(row["name"], "backfill", begin, end, None, state, input.now))
            for scope in self._fallback_scopes():
                # The fallback scope's events of the same range, with a cursor of their own.
                job = f"{scope}:{row['name']}"
                mine = await self._job_metadata(job)
                _add(total, await self._fetch_window(job, "backfill", _moment(mine.get("cursor")) or _moment(state["begin"]),
                                                     end, None, mine, input.now, self.deps.provider.for_scope(scope)))
            await self.deps.pool.execute(
                "UPDATE jobs SET status = 'finished', finished_at = now(), updated_at = now() WHERE name = $1",
                row["name"])
        return total

    async def _fetch_window(self, job: str, phase: str, begin: datetime, end: datetime, cap: int | None,
                            state: dict[str, Any], now: datetime, provider: EmailProvider | None = None,
                            ) -> PhaseResult:
        started = time.monotonic()
        provider = provider or self.deps.provider
        result, page, end, checkpoint = self._resume_point(job, phase, state, end)
        if begin > end:
            begin = end
        if page is None and begin >= end:
            # An empty window (the first missing window, or a clock that has not moved): nothing to ask.
            await self._apply(EventBatch(), result, job, {"resume_url": None, "window_end": _epoch(end),
                                                          "cursor": _epoch(end)})
            return await self._finish(result, job, phase, now, started)
        page_size = provider.limits.max_events_page
        # On a sending domain shared with other senders, only this site's newsletters (tagged so by
        # the send), as the reference filters them.
        tag = self._settings.email_tag
        query = EventQuery(begin=begin, end=end, names=PHASE_EVENTS[phase],
                           tags=("bulk-email", tag) if tag else (), limit=page_size if cap is None else min(page_size, cap))
        try:
            await self._read_and_apply(provider, query, page, cap, job, state, checkpoint, result)
        except ProviderError as error:
            raise activity_error(error, f"email analytics {phase}: {error}") from None
        return await self._finish(result, job, phase, now, started)

    @staticmethod
    def _resume_point(job: str, phase: str, state: dict[str, Any], end: datetime,
                      ) -> tuple[PhaseResult, str | None, datetime, dict[str, Any] | None]:
        """Where the window's reading starts: a retry resumes from its last heartbeat (with the figures
        it had), a run after a capped run from its saved page, any other at the window's first page."""
        details = activity.info().heartbeat_details
        resumed = details[0] if details and isinstance(details[0], dict) and details[0].get("job") == job else None
        if resumed:
            return PhaseResult.model_validate(resumed["result"]), resumed["url"], _moment(resumed["end"]), resumed
        if state.get("resume_url") and state.get("window_end"):
            return PhaseResult(phase=phase), state["resume_url"], _moment(state["window_end"]), None
        return PhaseResult(phase=phase), None, end, None

    async def _read_and_apply(self, provider: EmailProvider, query: EventQuery, page: str | None, cap: int | None,
                              job: str, state: dict[str, Any], checkpoint: dict[str, Any] | None,
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
                    applying = asyncio.create_task(self._apply_and_checkpoint(
                        batch, result, job, self._cursor(query, events.next_page, exhausted, last_moment, state),
                        {"job": job, "url": events.next_page, "end": _epoch(query.end)}, result.pages, result.events))
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

    @staticmethod
    def _cursor(query: EventQuery, next_page: str | None, exhausted: bool, last_moment: float | None,
                state: dict[str, Any]) -> dict[str, Any]:
        """Where the phase stands once a batch is applied: the window's end when it is read to the end,
        else the last event's time and the page to resume from (keys as stored since 0.1.0)."""
        end = _epoch(query.end)
        return {"resume_url": None if exhausted else next_page, "window_end": end,
                "cursor": end if exhausted else (last_moment or state.get("cursor"))}

    async def _finish(self, result: PhaseResult, job: str, phase: str, now: datetime, started: float) -> PhaseResult:
        """The phase's figures: time, cursor and lag; logged and counted in the metrics."""
        result.seconds = round(result.seconds + time.monotonic() - started, 3)
        saved = await self._job_metadata(job)
        result.cursor = _moment(saved.get("cursor"))
        result.lag_seconds = round((now - result.cursor).total_seconds(), 3) if result.cursor else None
        if phase.startswith("latest") and result.lag_seconds is not None \
                and result.lag_seconds > 2 * self._settings.analytics_interval_seconds \
                + self._settings.analytics_end_margin_seconds:
            # A cursor more than two runs behind means the fetch cannot keep up: worth a warning.
            activity.logger.warning("analytics %s cursor lags %.0f s behind now", phase, result.lag_seconds)
        activity.logger.info(
            "analytics %s: %d events (%s), %d applied, %d unknown, %d malformed, %.0f events/s, lag %s s%s",
            phase, result.events, dict(result.by_type), result.applied, result.unknown, result.malformed,
            result.events_per_second, result.lag_seconds, ", capped" if result.capped else "")
        self.metrics.counter("pressroom_analytics_events", "events read from the email provider").add(
            result.events, {"phase": phase})
        if result.lag_seconds is not None:
            self.metrics.gauge_float("pressroom_analytics_cursor_lag_seconds", "cursor lag behind now", "s").set(
                result.lag_seconds, {"phase": phase})
        return result

    async def _apply_and_checkpoint(self, batch: EventBatch, result: PhaseResult, job: str, cursor: dict[str, Any],
                                    resume: dict[str, Any], pages: int, events: int) -> dict[str, Any]:
        """Apply a batch, then heartbeat where a retry resumes: the page after this batch, with the
        figures as they were when the batch was cut (pages read since are not applied yet)."""
        await self._apply(batch, result, job, cursor)
        checkpoint = {**resume, "result": result.model_dump(mode="json") | {"pages": pages, "events": events}}
        activity.heartbeat(checkpoint)
        return checkpoint

    async def _apply(self, batch: EventBatch, result: PhaseResult, job: str, cursor: dict[str, Any]) -> None:
        """One transaction: the events (times, failures, unsubscribes, complaints, suppressions), the
        events set aside, and the cursor."""
        async def save_cursor(conn) -> None:
            await conn.execute(_SAVE_JOB, job, json.dumps(cursor))

        applied = await apply_batch(self.deps.pool, batch, "poll", save_cursor)
        result.applied += applied.matched
        result.unknown += applied.unknown
        result.malformed += applied.rejected
        result.by_type = dict(Counter(result.by_type) + batch.by_type)

    async def _job_metadata(self, name: str) -> dict[str, Any]:
        value = await self.deps.pool.fetchval("SELECT metadata FROM jobs WHERE name = $1", name)
        return json.loads(value) if value else {}

    # --- aggregates ---

    @activity.defn
    async def aggregate_stats(self, input: AggregateInput) -> AggregateResult:
        """Recount the emails and members whose events changed; a recount is always safe to repeat."""
        started = time.monotonic()
        async with heartbeating(), self.deps.pool.acquire() as conn, conn.transaction():
            emails, members = await aggregate(conn)
        result = AggregateResult(emails=emails, members=members, seconds=round(time.monotonic() - started, 3))
        activity.logger.info("analytics aggregates: %d emails, %d members in %.3f s", emails, members,
                             result.seconds)
        return result

    # --- run summaries ---

    @activity.defn
    async def record_run(self, input: RecordRunInput) -> None:
        """Keep the last runs' summaries in the jobs row `email-analytics`; rewriting one is harmless."""
        summary = input.result.model_dump(mode="json")
        summary["events_per_second"] = round(
            input.result.events / max(1e-9, sum(p.seconds for p in input.result.phases)), 1) \
            if input.result.phases else 0.0
        await self.deps.pool.execute(
            """INSERT INTO jobs (name, status, started_at, finished_at, metadata)
               VALUES ($1, $2, $3, now(), jsonb_build_object('runs', jsonb_build_array($4::jsonb)))
               ON CONFLICT (name) DO UPDATE SET status = EXCLUDED.status, started_at = EXCLUDED.started_at,
                   finished_at = now(), updated_at = now(),
                   metadata = jsonb_set(jobs.metadata, '{runs}', (
                       SELECT COALESCE(jsonb_agg(r), '[]'::jsonb) FROM (
                           SELECT r FROM jsonb_array_elements(
                               jsonb_build_array($4::jsonb) || COALESCE(jobs.metadata->'runs', '[]'::jsonb))
                               WITH ORDINALITY AS x(r, n)
                           WHERE n <= $5 ORDER BY n) kept))""",
            RUNS_JOB, "failed" if input.result.error else "finished", input.result.started_at,
            json.dumps(summary), RUNS_KEPT)

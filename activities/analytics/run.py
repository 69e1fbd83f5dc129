"""Email analytics' activities: each phase's windows fetched and applied, the aggregates, the run's summary."""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio import activity

from activities.analytics.models import (
    BACKFILL_PREFIX,
    PHASE_EVENTS,
    PHASE_JOBS,
    RUNS_JOB,
    AggregateInput,
    AggregateResult,
    FetchPhaseInput,
    PhaseResult,
    RecordRunInput,
    epoch,
    moment,
)
from activities.analytics.window import apply, read_and_apply, resume_point
from activities.delivery_events.aggregates import aggregate
from activities.heartbeat import heartbeating
from activities.metrics import Instruments
from activities.provider_errors import activity_error
from pressroom.providers.port import EmailProvider, EventQuery, ProviderError
from pressroom.store.events import EventBatch

if TYPE_CHECKING:
    from pressroom.dependencies import Dependencies
    from pressroom.settings import Settings

FIRST_LOOKBACK = timedelta(hours=24)  # where a phase with no cursor yet starts
RUNS_KEPT = 20


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
            begin = moment(state.get("cursor")) or end
        else:
            end = input.now - timedelta(seconds=settings.analytics_end_margin_seconds)
            begin = moment(state.get("cursor")) or (end - FIRST_LOOKBACK)
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
            begin = moment(state.get("cursor")) or moment(state["begin"])
            end = moment(state["end"])
            _add(total, await self._fetch_window(row["name"], "backfill", begin, end, None, state, input.now))
            for scope in self._fallback_scopes():
                # The fallback scope's events of the same range, with a cursor of their own.
                job = f"{scope}:{row['name']}"
                mine = await self._job_metadata(job)
                _add(total, await self._fetch_window(job, "backfill",
                                                     moment(mine.get("cursor")) or moment(state["begin"]), end, None,
                                                     mine, input.now, self.deps.provider.for_scope(scope)))
            await self.deps.pool.execute(
                "UPDATE jobs SET status = 'finished', finished_at = now(), updated_at = now() WHERE name = $1",
                row["name"])
        return total

    async def _fetch_window(self, job: str, phase: str, begin: datetime, end: datetime, cap: int | None,
                            state: dict[str, Any], now: datetime, provider: EmailProvider | None = None,
                            ) -> PhaseResult:
        started = time.monotonic()
        provider = provider or self.deps.provider
        result, page, end, checkpoint = resume_point(job, phase, state, end)
        if begin > end:
            begin = end
        if page is None and begin >= end:
            # An empty window (the first missing window, or a clock that has not moved): nothing to ask.
            await apply(self.deps.pool, EventBatch(), result, job,
                        {"resume_url": None, "window_end": epoch(end), "cursor": epoch(end)})
            return await self._finish(result, job, phase, now, started)
        page_size = provider.limits.max_events_page
        # On a sending domain shared with other senders, only this site's newsletters (tagged so by
        # the send), as the reference filters them.
        tag = self._settings.email_tag
        query = EventQuery(begin=begin, end=end, names=PHASE_EVENTS[phase],
                           tags=("bulk-email", tag) if tag else (),
                           limit=page_size if cap is None else min(page_size, cap))
        try:
            await read_and_apply(self.deps.pool, provider, query, page, cap, job, state, checkpoint, result)
        except ProviderError as error:
            raise activity_error(error, f"email analytics {phase}: {error}") from None
        return await self._finish(result, job, phase, now, started)

    async def _finish(self, result: PhaseResult, job: str, phase: str, now: datetime, started: float) -> PhaseResult:
        """The phase's figures: time, cursor and lag; logged and counted in the metrics."""
        result.seconds = round(result.seconds + time.monotonic() - started, 3)
        saved = await self._job_metadata(job)
        result.cursor = moment(saved.get("cursor"))
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

"""FetchEmailAnalyticsWorkflow: one run of the email analytics fetch, started by the schedule.

In the order of the work: latest opened events first (capped; a capped run restarts at
once through continue-as-new), then the other latest events, the missing window, the scheduled
backfills, and the aggregates. The schedule's overlap policy keeps two runs from fetching at once,
so no "already running" flag is kept in the database.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.analytics.models import (
        AggregateInput,
        FetchEmailAnalyticsInput,
        FetchEmailAnalyticsResult,
        FetchPhaseInput,
        RecordRunInput,
    )
    from activities.analytics.run import AnalyticsActivities
    from pressroom.errors import cause_of

# A failed run is tried again by the next scheduled run; a few quick attempts ride out a blip first.
# A refusal is not retried: ProviderRejected, or MailgunRejected from a worker older than the port.
FETCH_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0, maximum_attempts=3,
                          non_retryable_error_types=["ProviderRejected", "MailgunRejected"])
PHASES = ("latest-opened", "latest", "missing", "backfill")


@workflow.defn(name="FetchEmailAnalyticsWorkflow")
class FetchEmailAnalyticsWorkflow:
    @workflow.run
    async def run(self, input: FetchEmailAnalyticsInput) -> FetchEmailAnalyticsResult:
        now = input.now or workflow.now()
        result = FetchEmailAnalyticsResult(started_at=workflow.now(), now=now)
        phase = PHASES[0]
        try:
            for phase in PHASES:
                fetched = await workflow.execute_activity_method(
                    AnalyticsActivities.fetch_phase, FetchPhaseInput(phase=phase, now=now),
                    start_to_close_timeout=timedelta(hours=1), heartbeat_timeout=timedelta(minutes=1),
                    retry_policy=FETCH_RETRY)
                result.phases.append(fetched)
                if fetched.capped:
                    result.capped = True
                    break  # at the cap, restart at once with opened events first: opens are what authors watch
            phase = "aggregates"
            result.aggregate = await workflow.execute_activity_method(
                AnalyticsActivities.aggregate_stats, AggregateInput(), start_to_close_timeout=timedelta(minutes=10),
                # A worker that dies mid-recount is noticed in a minute, not at the 10-minute timeout.
                heartbeat_timeout=timedelta(minutes=1), retry_policy=FETCH_RETRY)
        except ActivityError as error:
            cause = cause_of(error).message
            result.error = f"email analytics failed in phase {phase}: {cause}"
            await self._record(result)
            raise ApplicationError(result.error, type="EmailAnalyticsFailed", non_retryable=True) from None
        await self._record(result)
        workflow.logger.info("email analytics: %d events %s, capped=%s", result.events, result.by_type(),
                             result.capped)
        if result.capped:
            # A pinned clock (tests) moves on with the real one: the cap's restart is immediate.
            workflow.continue_as_new(FetchEmailAnalyticsInput(now=input.now, restarts=input.restarts + 1))
        return result

    async def _record(self, result: FetchEmailAnalyticsResult) -> None:
        await workflow.execute_activity_method(
            AnalyticsActivities.record_run, RecordRunInput(result=result),
            start_to_close_timeout=timedelta(seconds=30), retry_policy=RetryPolicy(maximum_attempts=5))

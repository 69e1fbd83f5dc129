"""FetchEmailAnalyticsWorkflow's decisions: phases in order, a capped run restarting at once with
opened events first, a failure recorded with its phase, the run's summary always kept.

The fake phase reads its events through the in-memory email provider, the port the real activity
reads through: an unreachable provider and a refusing one fail it as they fail the real one
(`activity_error`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from activities.analytics.models import (
    AggregateInput,
    AggregateResult,
    FetchEmailAnalyticsInput,
    FetchEmailAnalyticsResult,
    FetchPhaseInput,
    PhaseResult,
    RecordRunInput,
)
from pressroom.providers.memory import MemoryProvider
from pressroom.providers.port import EventQuery, Message, ProviderError, activity_error
from tests.workflows.conftest import worker_for, workflow_id
from workflows.analytics import PHASES, FetchEmailAnalyticsWorkflow

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


MESSAGE = Message(from_address="news@example.com", subject="Issue 1", html="<p>Hi</p>", text="Hi",
                  tags=("bulk-email",))


async def opened_by(provider: MemoryProvider, count: int) -> None:
    """One message sent through the port to `count` readers, each of whom opens it."""
    readers = {f"r{n}@example.com": {} for n in range(count)}
    await provider.send(provider.prepare(MESSAGE), readers, mark={"email-id": "e1"})
    for address in readers:
        provider.add_event("opened", address, provider.sent[-1])


class FakeAnalytics:
    """The analytics activities: each phase reads the provider's opened events (10 by default)
    unless told to cap; a phase named in `failing` finds the provider as `provider_fault` sets it."""

    def __init__(self, *, capped_runs: int = 0, failure: tuple[str, BaseException] | None = None,
                 failing: str | None = None, provider_fault: str | None = None) -> None:
        self.capped_runs = capped_runs  # the first N runs hit the opened-events cap
        self.failure = failure
        self.provider = MemoryProvider()
        self.failing, self.provider_fault = failing, provider_fault
        self.calls: list[str] = []
        self.runs: list[str] = []
        self.attempts: dict[str, int] = {}
        self.nows: set[datetime] = set()
        self.heartbeat_timeouts: dict[str, timedelta | None] = {}
        self.recorded: list[FetchEmailAnalyticsResult] = []

    def _run_number(self) -> int:
        run_id = activity.info().workflow_run_id
        if run_id not in self.runs:
            self.runs.append(run_id)
        return self.runs.index(run_id)

    @activity.defn(name="fetch_phase")
    async def fetch_phase(self, input: FetchPhaseInput) -> PhaseResult:
        self.heartbeat_timeouts["fetch_phase"] = activity.info().heartbeat_timeout
        self.attempts[input.phase] = self.attempts.get(input.phase, 0) + 1
        self.nows.add(input.now)
        run = self._run_number()
        self.calls.append(f"{run}:{input.phase}")
        if self.failure and self.failure[0] == input.phase:
            raise self.failure[1]
        if not self.provider.sent:
            await opened_by(self.provider, 10)
        setattr(self.provider.faults, self.provider_fault or "outage", input.phase == self.failing)
        now = datetime.fromtimestamp(self.provider.now(), tz=UTC)
        try:
            page = await self.provider.read_events(None, EventQuery(begin=now - timedelta(hours=1), end=now,
                                                                    names=("opened",)))
        except ProviderError as error:
            raise activity_error(error) from None
        events = [self.provider.parse_event(item) for item in page.items]
        capped = input.phase == "latest-opened" and run < self.capped_runs
        return PhaseResult(phase=input.phase, events=len(events), applied=len(events),
                           by_type={"opened": sum(1 for event in events if event.name == "opened")}, capped=capped)

    @activity.defn(name="aggregate_stats")
    async def aggregate_stats(self, input: AggregateInput) -> AggregateResult:
        self.heartbeat_timeouts["aggregate_stats"] = activity.info().heartbeat_timeout
        self.calls.append(f"{self._run_number()}:aggregate")
        return AggregateResult(emails=1, members=10)

    @activity.defn(name="record_run")
    async def record_run(self, input: RecordRunInput) -> None:
        self.calls.append(f"{self._run_number()}:record")
        self.recorded.append(input.result)

    def activities(self) -> list:
        return [self.fetch_phase, self.aggregate_stats, self.record_run]


async def fetch(env, fake: FakeAnalytics) -> FetchEmailAnalyticsResult:
    async with worker_for(env, [FetchEmailAnalyticsWorkflow], fake.activities()) as task_queue:
        return await env.client.execute_workflow(
            FetchEmailAnalyticsWorkflow.run, FetchEmailAnalyticsInput(now=NOW),
            id=workflow_id("email-analytics"), task_queue=task_queue)


async def test_every_phase_then_the_aggregates_then_the_summary(env):
    fake = FakeAnalytics()
    result = await fetch(env, fake)
    assert fake.calls == [f"0:{phase}" for phase in PHASES] + ["0:aggregate", "0:record"]
    assert fake.nows == {NOW}, "every phase reads up to the run's one clock"
    assert [p.phase for p in result.phases] == list(PHASES)
    assert (result.events, result.by_type(), result.capped, result.error) == (40, {"opened": 40}, False, None)
    assert result.aggregate == AggregateResult(emails=1, members=10)
    assert fake.recorded == [result]


async def test_long_activities_are_watched_by_a_heartbeat_timeout(env):
    fake = FakeAnalytics()
    await fetch(env, fake)
    assert fake.heartbeat_timeouts["fetch_phase"] is not None
    assert fake.heartbeat_timeouts["aggregate_stats"] is not None


async def test_a_capped_run_stops_its_phases_and_restarts_at_once_with_opened_events_first(env):
    fake = FakeAnalytics(capped_runs=1)
    result = await fetch(env, fake)
    assert fake.calls == ["0:latest-opened", "0:aggregate", "0:record",
                          *[f"1:{phase}" for phase in PHASES], "1:aggregate", "1:record"]
    assert fake.recorded[0].capped and not fake.recorded[1].capped
    assert fake.nows == {NOW}, "a pinned clock stays pinned across the restart"
    assert not result.capped and len(result.phases) == len(PHASES)


async def test_a_refused_phase_fails_the_run_and_records_where(env):
    fake = FakeAnalytics(failing="latest", provider_fault="refused")
    with pytest.raises(WorkflowFailureError) as failed:
        await fetch(env, fake)
    expected = ("email analytics failed in phase latest: the in-memory provider refused the request (401): "
                "the key is not valid")
    assert (failed.value.cause.type, failed.value.cause.message) == ("EmailAnalyticsFailed", expected)
    assert fake.attempts["latest"] == 1, "a refusal is not retried"
    assert fake.calls == ["0:latest-opened", "0:latest", "0:record"], "no aggregates after a failed phase"
    assert fake.recorded[0].error == expected and [p.phase for p in fake.recorded[0].phases] == ["latest-opened"]


async def test_a_refusal_from_a_worker_older_than_the_port_is_not_retried_either(env):
    """During a deploy an older worker's activity raises MailgunRejected: still a refusal."""
    refused = ApplicationError("Mailgun refused the events request (401)", type="MailgunRejected",
                               non_retryable=False)
    fake = FakeAnalytics(failure=("latest", refused))
    with pytest.raises(WorkflowFailureError):
        await fetch(env, fake)
    assert fake.attempts["latest"] == 1


async def test_a_failing_phase_is_tried_a_few_times_before_the_run_fails(env):
    fake = FakeAnalytics(failing="missing", provider_fault="outage")
    with pytest.raises(WorkflowFailureError):
        await fetch(env, fake)
    assert fake.attempts["missing"] == 3
    assert fake.recorded[0].error == ("email analytics failed in phase missing: the in-memory provider cannot be "
                                      "reached; nothing was sent or read")

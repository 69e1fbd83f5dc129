"""Email analytics' phases and their jobs, and the inputs and results that cross the Temporal boundary."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Literal, overload

from pydantic import BaseModel, Field

from pressroom.providers.port import EventName

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


def epoch(moment: datetime) -> float:
    return moment.timestamp()


@overload
def moment(epoch: float) -> datetime: ...
@overload
def moment(epoch: None) -> None: ...
def moment(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, tz=UTC)


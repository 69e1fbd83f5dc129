"""The watchdog: a row whose run closed without finishing it ends in a state that says so.

A run can close without reaching its own last step: terminated by an operator, timed out, failed
after its retries, cancelled. Workflow code cannot record the first two (nothing of it runs), so
one check outside the runs covers every way for every job: it reads the rows still marked as being
worked on (an outbox entry `sending` or `failed` in its backoff, an email `submitting`) that have
not changed for a check interval, asks Temporal about their runs, and records the truth on each
whose run is closed, with the run's own failure message. It runs beside the outbox relay (one per
task queue, always running), every PRESSROOM_ORPHAN_CHECK_SECONDS; a failure only waits for the next check.
A post needs no entry here: its row stays `scheduled`, which is true, and the posts reconcile
starts its timer again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import asyncpg
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.service import RPCError, RPCStatusCode

from activities.metrics import Instruments

CHECK_LIMIT = 100  # rows looked at per job and check: a bounded number of describes each time
CONCURRENT_DESCRIBES = 8
DESCRIBE_TIMEOUT = timedelta(seconds=10)
NOT_FOUND = "NOT_FOUND"
# What the reference platform stores on an email whose send failed without a message of its own.
SEND_FAILED = "Something went wrong while sending the email"


@dataclass(frozen=True)
class ClosedRun:
    """How a run closed: its status (COMPLETED, FAILED, TERMINATED, TIMED_OUT, CANCELED…, or
    NOT_FOUND when Temporal holds no such run) and its failure's own message ("" when none)."""

    status: str
    message: str = ""

    def how(self) -> str:
        if self.status == NOT_FOUND:
            return "does not exist (closed longer ago than the namespace keeps runs)"
        return f"closed as {self.status}" + (f" ({self.message})" if self.message else "")


async def run_closed(client: Client, workflow_id: str, run_id: str | None = None,
                     rpc_timeout: timedelta | None = DESCRIBE_TIMEOUT) -> ClosedRun | None:
    """How the run closed, or None while it runs. Without run_id, the latest run of the workflow id.
    Any answer from Temporal but "not found" is raised."""

    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    try:
        run = await handle.describe(rpc_timeout=rpc_timeout)
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return ClosedRun(NOT_FOUND)
        raise
    if run.status is None or run.status == WorkflowExecutionStatus.RUNNING:
        return None
    if run.status == WorkflowExecutionStatus.COMPLETED:
        return ClosedRun(run.status.name)
    return ClosedRun(run.status.name, await _failure_message(client, workflow_id, run.run_id, rpc_timeout))


async def _failure_message(client: Client, workflow_id: str, run_id: str, rpc_timeout: timedelta | None) -> str:
    """The innermost cause's message of a closed run's failure (an activity's own error, the
    terminate reason), decoded by the client's codec; "" when there is none."""

    try:
        await client.get_workflow_handle(workflow_id, run_id=run_id).result(follow_runs=False,
                                                                             rpc_timeout=rpc_timeout)
    except WorkflowFailureError as error:
        cause: BaseException = error
        while (inner := getattr(cause, "cause", None)) is not None:
            cause = inner
        if cause is error:
            return ""
        # The failure as recorded: the SDK reads an empty message as "Application error".
        recorded = getattr(cause, "failure", None)
        message = recorded.message if recorded is not None else getattr(cause, "message", str(cause))
        return " ".join(message.split())
    return ""


@dataclass(frozen=True)
class Watched:
    """One row a job has left unfinished, and the run that was to finish it."""

    row: asyncpg.Record
    workflow_id: str
    first_run_id: str | None = None  # the run chain that holds the row (emails); None: the latest run


@dataclass(frozen=True)
class Job:
    """What the watchdog needs of a job: its unfinished rows and how to record a closed run on one."""

    name: str  # what a row is, in log lines and the metric's `job` label: "email", "outbox entry"
    unfinished: Callable[[asyncpg.Pool, float, Any, int], Awaitable[list[Watched]]]
    record: Callable[[asyncpg.Pool, Watched, ClosedRun], Awaitable[str | None]]  # the message stored, or None
    cursor: Callable[[Watched], Any]


class Watchdog:
    """Every `interval` seconds, each job's unfinished rows whose run has closed are recorded so."""

    def __init__(self, pool: asyncpg.Pool, temporal: Client, interval: float) -> None:
        self.pool = pool
        self.temporal = temporal
        self.interval = interval
        self.metrics = Instruments()

    async def watch(self, jobs: list[Job]) -> None:
        """Check each job, then wait an interval, for ever. Each job goes on from where its last
        check stopped, so old rows whose runs are still working do not hide newer ones."""
        after: dict[str, Any] = {}
        while True:
            for job in jobs:
                try:
                    after[job.name] = await self.check(job, after.get(job.name))
                except Exception as error:  # noqa: BLE001 (one job's failure must not stop the watch over the others)
                    activity.logger.warning("looking for each %s whose run closed failed (%s: %s); "
                                            "looking again in %g s",
                                            job.name, type(error).__name__, error, self.interval)
            await asyncio.sleep(self.interval)

    async def check(self, job: Job, after: Any = None) -> Any:
        """One check of the job's oldest unfinished rows after `after`; returns where the next goes on."""
        rows = await job.unfinished(self.pool, float(self.interval), after, CHECK_LIMIT)
        slots = asyncio.Semaphore(CONCURRENT_DESCRIBES)

        async def one(watched: Watched) -> None:
            async with slots:
                closed = await self._closed(watched)
            if closed is None:
                return
            message = await job.record(self.pool, watched, closed)
            if message is not None:
                activity.logger.warning("%s %s: %s", job.name, watched.row["id"], message)
                self.metrics.counter("pressroom_run_closed_unfinished",
                                     "Rows recorded as failed because their run closed without finishing them").add(
                    1, {"job": job.name, "closed_as": closed.status})

        await asyncio.gather(*(one(watched) for watched in rows))
        return job.cursor(rows[-1]) if len(rows) == CHECK_LIMIT else None

    async def _closed(self, watched: Watched) -> ClosedRun | None:
        """As `run_closed` for the row's run chain, or None when Temporal cannot say now (logged)."""

        try:
            if watched.first_run_id is None:
                return await run_closed(self.temporal, watched.workflow_id)
            return await chain_closed(self.temporal, watched.workflow_id, watched.first_run_id)
        except RPCError as error:
            activity.logger.warning("cannot ask Temporal about %s (%s); looking again at the next check",
                                    watched.workflow_id, error.message)
            return None


async def chain_closed(client: Client, workflow_id: str, first_run_id: str) -> ClosedRun | None:
    """How the run chain that began with `first_run_id` closed (continued as new any number of
    times), or None while it runs."""

    try:
        latest = await client.get_workflow_handle(workflow_id).describe(rpc_timeout=DESCRIBE_TIMEOUT)
    except RPCError as error:
        if error.status != RPCStatusCode.NOT_FOUND:
            raise
        return ClosedRun(NOT_FOUND)
    if first_run_id in (latest.run_id, latest.raw_info.first_run_id):
        return await run_closed(client, workflow_id, latest.run_id)
    # A later chain of the same workflow id: this one has closed; say how its first run did.
    return await run_closed(client, workflow_id, first_run_id) or ClosedRun(NOT_FOUND)

"""Waiting on a run without leaving the operator guessing: is any worker there to run it?

A run whose task queue has no worker waits silently for ever. Commands that wait ask Temporal
who polls the queue (DescribeTaskQueue) and say so within seconds, then keep waiting.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, TaskQueueKind, TaskQueueType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest, GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from pressroom.settings import get_settings


def seen_within() -> timedelta:
    """How recent a worker's last poll must be for it to count as there (PRESSROOM_WORKER_SEEN_WITHIN_SECONDS)."""
    return timedelta(seconds=get_settings().worker_seen_within_seconds)


def no_worker_message(task_queue: str) -> str:
    return f"no worker is polling task queue {task_queue}; start one with `pressroom worker`"


async def has_worker(client: Client, task_queue: str) -> bool | None:
    """Does a worker poll the queue for workflow tasks? None when Temporal cannot say."""
    pollers = await fresh_pollers(client, task_queue)
    return None if pollers is None else bool(pollers)


async def fresh_pollers(client: Client, task_queue: str, *, activities: bool = False) -> list[str] | None:
    """The identities of the workers that polled the queue lately, for workflow tasks (or activity
    tasks); None when Temporal cannot say."""
    try:
        response = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY if activities
            else TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW), timeout=QUERY_TIMEOUT)
    except RPCError:
        return None
    now, within = datetime.now(UTC), seen_within()
    return sorted({poller.identity for poller in response.pollers
                   if not poller.HasField("last_access_time")
                   or now - poller.last_access_time.ToDatetime(UTC) < within})


@asynccontextmanager
async def watching_for_worker(client: Client, task_queue: str, say: Callable[[str], None], *,
                              first_check: float = 1.0, every: float = 5.0,
                              workflow_id: str | None = None) -> AsyncIterator[None]:
    """While the block waits on a run, say when no worker polls its queue (and when one arrives);
    with `workflow_id`, also when the worker that polls does not answer the run's queries (it died)."""
    async def watch() -> None:
        await asyncio.sleep(first_check)
        missing = False
        unanswered = 0
        while True:
            present = await has_worker(client, task_queue)
            if present is False and not missing:
                say(no_worker_message(task_queue))
                missing = True
            elif present and missing:
                say(f"a worker is polling task queue {task_queue} now")
                missing = False
            if present and workflow_id:
                answered = await answers(client, workflow_id)
                if answered is False:
                    unanswered += 1
                    if unanswered == 2:  # twice: one slow answer on a loaded machine is not a death
                        say(no_answer_message(task_queue))
                elif answered:
                    if unanswered >= 2:
                        say(f"a worker is answering again on task queue {task_queue}")
                    unanswered = 0
            await asyncio.sleep(every if not unanswered else 0.5)

    task = asyncio.create_task(watch())
    try:
        yield
    finally:
        task.cancel()
        # Let a check in flight end here rather than at interpreter exit, when the SDK's threads
        # must not call back into Python.
        await asyncio.gather(task, return_exceptions=True)


async def answers(client: Client, workflow_id: str) -> bool | None:
    """Does a worker answer the run's built-in metadata query within QUERY_TIMEOUT? None: the run
    refused it (closed, or before its first task), which says nothing about workers."""
    try:
        await client.get_workflow_handle(workflow_id).query("__temporal_workflow_metadata",
                                                            result_type=WorkflowMetadata, rpc_timeout=QUERY_TIMEOUT)
        return True
    except RPCError as error:
        return False if is_unanswered(error) else None
    except Exception:  # noqa: BLE001 (any other failure means the question has no answer)
        return None


# A live worker answers a query in milliseconds; one that died is still listed as polling for
# about a minute, and a query sent to it is never answered. Status and waiting commands bound
# every query by this and, past it, say so and read PostgreSQL and the run's history instead.
QUERY_TIMEOUT = timedelta(seconds=3)


def no_answer_message(task_queue: str, seconds: float | None = None) -> str:
    seconds = QUERY_TIMEOUT.total_seconds() if seconds is None else seconds
    return (f"no worker is answering (a query got no answer within {seconds:.2g} s; the worker "
            f"last polling task queue {task_queue} may have died); start one with `pressroom worker`")


# A status command answers within this, counted from its process's start: the operator waits on it
# exactly when something is wrong (a dead worker's queries go unanswered until their bound), and on
# a busy machine starting the interpreter alone takes seconds. What is left of it, never more than
# QUERY_TIMEOUT and never less than STATUS_LEAST_SECONDS (a live worker's answer on a busy
# machine), bounds everything the command asks Temporal. The budget is spent whole when a worker
# was just killed (its query goes unanswered), and the command ends a little after it (printing,
# the Temporal runtime joined, the interpreter finalised: 0.5-1.5 s at the suite's load): 3.2 s
# ends it within about 4 s quiet and within 5 s at three test workers' load.
STATUS_BUDGET_SECONDS = 3.2
STATUS_LEAST_SECONDS = 1.0


def process_age_seconds() -> float:
    """Seconds since this process started (Linux's /proc); 0.0 where that cannot be read."""
    try:
        with open("/proc/self/stat") as stat:
            started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as uptime:
            up = float(uptime.read().split()[0])
        return max(0.0, up - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def status_query_seconds(age: float | None) -> float:
    """How long a status command `age` seconds old may wait on Temporal now, from what is left of
    its budget; a caller that is no command (age None: a server, a test) has the queries' own bound."""
    if age is None:
        return QUERY_TIMEOUT.total_seconds()
    return max(STATUS_LEAST_SECONDS, min(QUERY_TIMEOUT.total_seconds(), STATUS_BUDGET_SECONDS - age))


def is_unanswered(error: BaseException) -> bool:
    """A query that nobody answered in time, or that Temporal would not pass on because no worker
    polled lately (as against one refused by the run, or a run not there)."""
    if not isinstance(error, RPCError):
        return False
    return error.status in (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED) or (
        error.status == RPCStatusCode.FAILED_PRECONDITION and "no poller" in (error.message or "")) or (
        # Queries pile up for a worker that does not take them ("consistent query buffer is full").
        error.status == RPCStatusCode.RESOURCE_EXHAUSTED and "query buffer" in (error.message or ""))


def as_words(details: str) -> str:
    """A run's current details (Markdown in the Web UI) on one line, in the same words."""
    return "; ".join(part.strip() for part in details.replace("**", "").split("\n\n") if part.strip())


# How far back from the end of a run's history a waiting timer is looked for.
HISTORY_TAIL = 200


async def open_timer(client: Client, workflow_id: str, run_id: str | None = None) -> str | None:
    """What the run waits for on a timer, in the words of the timer's summary (as the Web UI shows
    it) and until when; read from the end of its history, so no worker is needed. None: no timer."""
    try:
        response = await client.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=client.namespace, execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id or ""),
                maximum_page_size=HISTORY_TAIL), timeout=QUERY_TIMEOUT)
    except RPCError:
        return None
    closed: set[str] = set()
    for event in response.history.events:  # newest first
        if event.event_type == EventType.EVENT_TYPE_TIMER_FIRED:
            closed.add(event.timer_fired_event_attributes.timer_id)
        elif event.event_type == EventType.EVENT_TYPE_TIMER_CANCELED:
            closed.add(event.timer_canceled_event_attributes.timer_id)
        elif event.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
            started = event.timer_started_event_attributes
            if started.timer_id in closed:
                continue
            fires = event.event_time.ToDatetime(UTC) + started.start_to_fire_timeout.ToTimedelta()
            summary = await _summary(client, event)
            until = fires.strftime("%Y-%m-%d %H:%M:%S UTC")
            if not summary:
                return f"a timer until {until}"
            return summary if "resumes at" in summary else f"{summary} until {until}"
    return None


async def _summary(client: Client, event) -> str:
    if not event.HasField("user_metadata") or not event.user_metadata.HasField("summary"):
        return ""
    try:
        [text] = await client.data_converter.decode([event.user_metadata.summary], [str])
    except Exception:  # noqa: BLE001 (a summary this process cannot decode (another key): the time alone still says it)
        return ""
    return str(text)

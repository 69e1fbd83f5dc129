"""Waiting on a run without leaving the operator guessing: is any worker there to run it?

A run whose task queue has no worker waits silently for ever. Commands that wait ask Temporal
who polls the queue (DescribeTaskQueue) and say so within seconds, then keep waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone

from temporalio.client import Client
from temporalio.service import RPCError

# A live worker polls again at least every minute or so (a long poll lasts up to about 60 s);
# Temporal keeps listing a worker that stopped for minutes, so older pollers do not count.
POLLER_FRESH = timedelta(seconds=90)


def no_worker_message(task_queue: str) -> str:
    return f"no worker is polling task queue {task_queue}; start one with `pressroom worker`"


async def has_worker(client: Client, task_queue: str) -> bool | None:
    """Does a worker poll the queue for workflow tasks? None when Temporal cannot say."""
    from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    try:
        response = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW))
    except RPCError:
        return None
    now = datetime.now(timezone.utc)
    return any(not poller.HasField("last_access_time") or now - poller.last_access_time.ToDatetime(timezone.utc)
               < POLLER_FRESH for poller in response.pollers)


@asynccontextmanager
async def watching_for_worker(client: Client, task_queue: str, say: Callable[[str], None], *,
                              first_check: float = 1.0, every: float = 5.0) -> AsyncIterator[None]:
    """While the block waits on a run, say when no worker polls its queue (and when one arrives)."""
    async def watch() -> None:
        await asyncio.sleep(first_check)
        missing = False
        while True:
            present = await has_worker(client, task_queue)
            if present is False and not missing:
                say(no_worker_message(task_queue))
                missing = True
            elif present and missing:
                say(f"a worker is polling task queue {task_queue} now")
                missing = False
            await asyncio.sleep(every)

    task = asyncio.create_task(watch())
    try:
        yield
    finally:
        task.cancel()
        # Let a check in flight end here rather than at interpreter exit, when the SDK's threads
        # must not call back into Python.
        await asyncio.gather(task, return_exceptions=True)

"""What every operation needs: a Temporal client from the settings, whether a run is running, and a
time read from the operator."""

from __future__ import annotations

from datetime import datetime

from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from operations.waiting import has_worker
from pressroom.inputs import moment
from pressroom.settings import Settings, get_settings
from pressroom.temporal import connect


async def temporal_client(settings: Settings | None = None):
    return await connect(settings or get_settings())


async def running(handle) -> bool:
    """Is the workflow handle's run running (False when there is none)?"""
    try:
        return (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    except RPCError as error:
        if error.status != RPCStatusCode.NOT_FOUND:
            raise
        return False


async def run_summary(client, description) -> dict:
    """A run as status commands show it; a running one says whether a worker polls its task queue."""
    status = description.status.name.lower() if description.status else None
    return {"run_id": description.run_id, "status": status, "task_queue": description.task_queue,
            "worker_polling": await has_worker(client, description.task_queue) if status == "running" else None}


def parse_moment(text: str, option: str) -> datetime:
    """An ISO 8601 time with its offset, in this century (pressroom/inputs.py), else one-line BadInput."""
    return moment(text, option)

"""What every operation needs: a Temporal client from the settings, and a time read from the operator."""

from __future__ import annotations

from datetime import datetime

from pressroom.errors import BadInput
from pressroom.settings import Settings, get_settings


async def temporal_client(settings: Settings | None = None):
    from pressroom.temporal import connect

    return await connect(settings or get_settings())


async def run_summary(client, description) -> dict:
    """A run as status commands show it; a running one says whether a worker polls its task queue."""
    from pressroom.waiting import has_worker

    status = description.status.name.lower() if description.status else None
    return {"run_id": description.run_id, "status": status, "task_queue": description.task_queue,
            "worker_polling": await has_worker(client, description.task_queue) if status == "running" else None}


def parse_moment(text: str, option: str) -> datetime:
    """An ISO 8601 time with its offset (2026-11-01T00:00:00+00:00 or ...Z), else one-line BadInput."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadInput(f"{option} {text!r} is not an ISO 8601 time (such as 2026-11-01T00:00:00+00:00)") from None
    if moment.tzinfo is None:
        raise BadInput(f"{option} {text!r} needs a UTC offset (such as +00:00 or Z)")
    return moment

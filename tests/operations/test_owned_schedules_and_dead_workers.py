"""The namespace's shared schedules stay on the task queue they run on when a worker starts on
another; `pressroom check` names a schedule on a queue nobody polls, and a worker killed -9 at once."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from activities.analytics.models import SCHEDULE_ID
from operations.analytics import analytics_schedule, ensure_schedule
from operations.posts import RECONCILE_SCHEDULE_ID, reconcile_at_worker_start
from operations.readiness import check_schedules
from tests.conftest import make_settings
from tests.newsletter.test_failures import wait_until
from tests.operations.test_check import check, healthy_env, lines_of, spawn_worker  # noqa: F401 (fixture)


async def queue_of(client, schedule_id: str) -> str:
    return (await client.get_schedule_handle(schedule_id).describe()).schedule.action.task_queue


@pytest.mark.usefixtures("schedules_removed_after")
async def test_a_worker_on_another_queue_leaves_the_shared_schedules_where_they_run(dev_env, postgres_url, mailgun):
    client = dev_env.client
    home, other = make_settings(postgres_url, mailgun), make_settings(postgres_url, mailgun)
    assert await ensure_schedule(client, home) == "created"
    assert await reconcile_at_worker_start(client, home) == "created"

    # What `pressroom worker` on the other queue does at its start.
    assert await ensure_schedule(client, other) == f"left on task queue {home.task_queue}"
    assert await reconcile_at_worker_start(client, other) == f"left on task queue {home.task_queue}"
    assert await queue_of(client, SCHEDULE_ID) == home.task_queue
    assert await queue_of(client, RECONCILE_SCHEDULE_ID) == home.task_queue

    # `check` of the other configuration names them and their queue, which nobody polls here.
    result = await check_schedules(client, other)
    assert not result.ok
    assert result.detail.startswith(f"{SCHEDULE_ID} runs on task queue {home.task_queue}; {RECONCILE_SCHEDULE_ID} "
                                    f"runs on task queue {home.task_queue}, which no worker polls")
    assert (await check_schedules(client, home)).ok

    # The operator's explicit word moves the analytics schedule.
    assert await analytics_schedule(other, client) == "updated"
    assert await queue_of(client, SCHEDULE_ID) == other.task_queue


@pytest.mark.usefixtures("schedules_removed_after")
async def test_check_sees_a_worker_killed_minus_nine_at_once(healthy_env, db):  # noqa: F811
    # Temporal's own horizon as in production: it is the relay's unanswered query that tells.
    env = {**healthy_env, "PRESSROOM_WORKER_SEEN_WITHIN_SECONDS": "90"}
    worker = spawn_worker(env)
    try:
        async def passes() -> bool:
            return lines_of(await check(env)).get("Workers", "").startswith("ok")
        await wait_until(passes, 90)
    finally:
        worker.send_signal(signal.SIGKILL)
        await asyncio.to_thread(worker.wait)
    killed = time.monotonic()
    line = lines_of(await check(env))["Workers"]
    print(f"\ncheck answered {time.monotonic() - killed:.1f} s after the kill: {line}")
    assert line.startswith("FAIL") and "no worker is answering" in line, line

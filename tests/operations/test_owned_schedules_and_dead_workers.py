"""One namespace holds several sites, each on its own task queue: each site's schedules have ids that
name its queue, `pressroom check` fails when the schedule it needs runs on another queue, and a worker
killed -9 is seen at once."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from temporalio.service import RPCError, RPCStatusCode

from activities.analytics.models import SCHEDULE_ID
from operations.analytics import analytics_schedule, analytics_schedule_id, build_schedule, ensure_schedule
from operations.posts import RECONCILE_SCHEDULE_ID, reconcile_at_worker_start, reconcile_schedule_id
from operations.readiness import check_schedules
from pressroom.temporal import DEFAULT_TASK_QUEUE, site_schedule_id
from tests.conftest import make_settings
from tests.newsletter.test_failures import wait_until
from tests.operations.test_check import check, healthy_env, lines_of, spawn_worker  # noqa: F401 (fixture)
from worker import running_worker


async def queue_of(client, schedule_id: str) -> str:
    return (await client.get_schedule_handle(schedule_id).describe()).schedule.action.task_queue


def test_the_default_task_queue_keeps_the_bare_ids():
    assert site_schedule_id(SCHEDULE_ID, DEFAULT_TASK_QUEUE) == "email-analytics"
    assert site_schedule_id(RECONCILE_SCHEDULE_ID, "site-b") == "posts-reconcile-site-b"


@pytest.mark.usefixtures("schedules_removed_after")
async def test_two_sites_in_one_namespace_each_have_their_own_schedules(dev_env, postgres_url, mailgun):
    client = dev_env.client
    home, other = make_settings(postgres_url, mailgun), make_settings(postgres_url, mailgun)
    async with running_worker(client, home):  # the first site runs: its queue is polled
        assert await ensure_schedule(client, home) == "created"
        assert await reconcile_at_worker_start(client, home) == "created"

        # What `pressroom worker` of the second site does at its start: schedules of its own.
        assert await ensure_schedule(client, other) == "created"
        assert await reconcile_at_worker_start(client, other) == "created"
        for settings in (home, other):
            assert await queue_of(client, analytics_schedule_id(settings)) == settings.task_queue
            assert await queue_of(client, reconcile_schedule_id(settings)) == settings.task_queue
            assert (await check_schedules(client, settings)).ok

        # The second site's schedule moved onto the first's (polled) queue: its analytics never run.
        await client.get_schedule_handle(analytics_schedule_id(other)).delete()
        await client.create_schedule(analytics_schedule_id(other), build_schedule(home))
        result = await check_schedules(client, other)
        assert not result.ok
        assert result.detail.startswith(f"{analytics_schedule_id(other)} runs on task queue {home.task_queue}, "
                                        f"not {other.task_queue}")

        # The operator's explicit word moves it back.
        assert await analytics_schedule(other, client) == "updated"
        assert await queue_of(client, analytics_schedule_id(other)) == other.task_queue
        assert (await check_schedules(client, other)).ok


@pytest.mark.usefixtures("schedules_removed_after")
async def test_a_site_on_its_own_queue_takes_over_its_bare_schedule_paused_as_it_was(dev_env, postgres_url, mailgun):
    client = dev_env.client
    site = make_settings(postgres_url, mailgun)
    # Before ids named the queue: `email-analytics` on this site's queue, paused by its operator.
    await client.create_schedule(SCHEDULE_ID, build_schedule(site))
    await client.get_schedule_handle(SCHEDULE_ID).pause(note="paused by the operator")

    assert await ensure_schedule(client, site) == "created"
    described = await client.get_schedule_handle(analytics_schedule_id(site)).describe()
    assert described.schedule.state.paused and described.schedule.state.note == "paused by the operator"
    with pytest.raises(RPCError) as gone:  # deleted: the site's work runs from one schedule
        await client.get_schedule_handle(SCHEDULE_ID).describe()
    assert gone.value.status == RPCStatusCode.NOT_FOUND


@pytest.mark.usefixtures("schedules_removed_after")
async def test_another_sites_bare_schedule_is_left_alone(dev_env, postgres_url, mailgun):
    client = dev_env.client
    first, site = make_settings(postgres_url, mailgun), make_settings(postgres_url, mailgun)
    await client.create_schedule(SCHEDULE_ID, build_schedule(first))
    assert await ensure_schedule(client, site) == "created"
    assert await queue_of(client, SCHEDULE_ID) == first.task_queue


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

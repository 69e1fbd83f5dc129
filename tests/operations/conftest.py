"""Fixtures of the operations' tests."""

import contextlib

import pytest


@pytest.fixture
async def schedules_removed_after(dev_env):
    """A `pressroom worker` creates the namespace's schedules at start; later tests expect none."""
    from temporalio.service import RPCError

    from activities.analytics.models import SCHEDULE_ID
    from operations.posts import RECONCILE_SCHEDULE_ID

    yield
    for schedule_id in (SCHEDULE_ID, RECONCILE_SCHEDULE_ID):
        with contextlib.suppress(RPCError):  # not created
            await dev_env.client.get_schedule_handle(schedule_id).delete()

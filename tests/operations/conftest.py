"""Fixtures of the operations' tests."""

import contextlib

import pytest


@pytest.fixture
async def schedules_removed_after(dev_env):
    """A `pressroom worker` creates the namespace's schedules at start, on its own task queue, and
    leaves one another worker made on another queue where it is: the test starts with none (an
    earlier test's, on a queue nobody polls any more, would fail `check`), and later tests expect none."""
    from temporalio.service import RPCError

    from activities.analytics.models import SCHEDULE_ID
    from operations.posts import RECONCILE_SCHEDULE_ID

    async def remove() -> None:
        for schedule_id in (SCHEDULE_ID, RECONCILE_SCHEDULE_ID):
            with contextlib.suppress(RPCError):  # not created
                await dev_env.client.get_schedule_handle(schedule_id).delete()

    await remove()
    yield
    await remove()

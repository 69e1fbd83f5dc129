"""The fast tier: each workflow's decisions on the time-skipping server, with its activities
replaced by fakes registered under the real activity names (the pattern of the samples'
tests/hello/hello_activity_test.py).

No PostgreSQL, no Mailgun simulator, no dev server: `.venv/bin/pytest tests/workflows` runs in
seconds. The real activities are tested against real servers in the other folders.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import pytest
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.conftest import time_skipping_server_of_its_own


# The session's servers are started lazily, by the first test that asks for them. In this folder
# asking is a mistake: these overrides make it fail loudly instead of making the tier slow.
@pytest.fixture(scope="session")
def postgres_server():
    pytest.fail("the fast tier (tests/workflows) does not start PostgreSQL: fake the activity instead")


@pytest.fixture(scope="session")
def simulator():
    pytest.fail("the fast tier (tests/workflows) does not start the Mailgun simulator: fake the activity instead")


@pytest.fixture(scope="session")
def dev_env():
    pytest.fail("the fast tier (tests/workflows) runs on the time-skipping server only")


# Its tests skip years ahead (long timers, daily caps): a clock of their own.
time_skipping_env = time_skipping_server_of_its_own()


@pytest.fixture
def env(time_skipping_env: WorkflowEnvironment) -> WorkflowEnvironment:
    return time_skipping_env


@asynccontextmanager
async def worker_for(env: WorkflowEnvironment, workflows: Sequence[type],
                     activities: Sequence[Callable]) -> AsyncIterator[str]:
    """A worker on a task queue of its own, running `workflows` with the given fake activities."""
    task_queue = f"fast-{uuid.uuid4().hex[:12]}"
    async with Worker(env.client, task_queue=task_queue, workflows=list(workflows), activities=list(activities)):
        yield task_queue


def workflow_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"

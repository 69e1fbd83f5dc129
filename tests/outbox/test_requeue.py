"""`outbox requeue` while the entry's delivery run is still open.

An aborted entry's row is written by its delivery run's last activity, a moment before the run
closes. Here that moment is held open: the run's last workflow task waits for a workflow worker
that the test has stopped, while activities (the relay's among them) go on running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.worker import Worker

from activities.outbox import outbox_workflow_id
from operations.members import add_member
from operations.outbox import ensure_relay, requeue_outbox_entry
from pressroom.errors import PressroomError
from tests.foundation.test_cli import assert_one_line_error, pressroom
from tests.newsletter.test_failures import wait_until
from tests.outbox.test_outbox import WELCOME, entry_state, settled, welcomes_to
from worker import WORKFLOWS, build_activities, open_dependencies
from workflows.outbox import RELAY_WORKFLOW_ID

# abort_entry's first statement, waiting on the test's uncommitted ledger line for the same key.
ABORT_WAITING = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                 "AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO idempotency_ledger%'")


@dataclass
class OpenAbortedEntry:
    outbox_id: str
    key: str
    resume_workflows: Callable[[], Worker]  # starts a workflow worker again


@asynccontextmanager
async def aborted_while_its_run_is_open(db, mailgun, dev_env, settings, address: str):
    """An entry that reads aborted while its delivery run is still running (its last task unrun)."""
    client = dev_env.client
    await db.execute(WELCOME)
    added = await add_member(address, welcome=True, settings=settings)  # no worker yet: nothing is claimed
    outbox_id = await db.fetchval("SELECT id FROM outbox WHERE idempotency_key = $1", added.welcome_key)
    # A certain refusal (429) and one attempt: the delivery aborts at once, with no look-up round.
    mailgun.set_faults(rate_limit_rate=1.0, retry_after_seconds=0)
    # The gate: an uncommitted ledger line for the key holds abort_entry's insert until rolled back.
    gate = await db.acquire()
    held = gate.transaction()
    await held.start()
    await gate.execute("INSERT INTO idempotency_ledger (idempotency_key, payload_digest, status) "
                       "VALUES ($1, 'gate', 'failed')", added.welcome_key)

    workflows: list[Worker] = []
    running: list[asyncio.Task] = []
    try:
        async with open_dependencies(settings, client) as deps:
            def workflow_worker() -> Worker:
                # Workflow tasks and the local activities they run; no cache, so no sticky queue: a
                # restarted worker takes the run's next task at once.
                worker = Worker(client, task_queue=settings.task_queue, workflows=WORKFLOWS,
                                activities=build_activities(deps), no_remote_activities=True,
                                max_cached_workflows=0)
                workflows.append(worker)
                running.append(asyncio.create_task(worker.run()))
                return worker

            try:
                workflow_worker()
                async with Worker(client, task_queue=settings.task_queue, activities=build_activities(deps)):
                    await ensure_relay(client, settings)
                    await wait_until(lambda: db.fetchval(ABORT_WAITING), timeout=60)
                    await workflows[0].shutdown()  # the run waits on abort_entry: no task is lost
                    await held.rollback()
                    await settled(db, added.welcome_key, "aborted", timeout=30)
                    run = await client.get_workflow_handle(outbox_workflow_id(added.welcome_key)).describe()
                    assert run.status == WorkflowExecutionStatus.RUNNING  # the moment the race lived in
                    yield OpenAbortedEntry(outbox_id, added.welcome_key, workflow_worker)
                    await client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{settings.task_queue}").terminate()
            finally:
                for worker in workflows:
                    if not worker.is_shutdown:
                        await worker.shutdown()
    finally:
        if gate.is_in_transaction():
            await held.rollback()
        await db.release(gate)
        await asyncio.gather(*running, return_exceptions=True)


async def test_a_requeue_while_the_aborted_run_closes_waits_for_it_and_the_entry_is_sent_once(
        db, mailgun, dev_env, outbox_settings):
    settings = outbox_settings(outbox_max_attempts=1)
    async with aborted_while_its_run_is_open(db, mailgun, dev_env, settings, "closing@example.com") as entry:
        mailgun.set_faults(rate_limit_rate=0.0)
        requeue = asyncio.create_task(requeue_outbox_entry(entry.outbox_id, client=dev_env.client,
                                                           settings=settings))
        await asyncio.sleep(1)  # the relay, polling every 0.2 s, would have claimed a pending entry
        assert not requeue.done(), "the requeue did not wait for the open run"
        assert await entry_state(db, entry.key) == "aborted"
        entry.resume_workflows()
        await requeue
        await settled(db, entry.key, timeout=60)
    assert len(welcomes_to(mailgun, "closing@example.com")) == 1
    assert await db.fetchval("SELECT status FROM idempotency_ledger WHERE idempotency_key = $1",
                             entry.key) == "succeeded"


ENTRY_AND_LEDGER = ("SELECT o::text AS entry, l::text AS ledger, r::text AS recipient FROM outbox o "
                    "LEFT JOIN idempotency_ledger l USING (idempotency_key) "
                    "LEFT JOIN automated_email_recipients r ON r.member_id = o.payload->>'member_id' "
                    "WHERE o.id = $1")


async def test_a_requeue_while_the_run_stays_open_is_refused_in_one_line_and_writes_nothing(
        db, mailgun, dev_env, outbox_settings, postgres_url):
    settings = outbox_settings(outbox_max_attempts=1)
    async with aborted_while_its_run_is_open(db, mailgun, dev_env, settings, "stuck@example.com") as entry:
        mailgun.set_faults(rate_limit_rate=0.0)
        before = await db.fetchrow(ENTRY_AND_LEDGER, entry.outbox_id)
        with pytest.raises(PressroomError) as refused:
            await requeue_outbox_entry(entry.outbox_id, client=dev_env.client, settings=settings, wait_seconds=1)
        assert entry.outbox_id in str(refused.value) and "still running" in str(refused.value)
        # The command line says the same in one line, after its own (default) wait.
        env = {"DATABASE_URL": postgres_url, "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
               "PRESSROOM_TASK_QUEUE": settings.task_queue}
        assert_one_line_error(await asyncio.to_thread(pressroom, "outbox", "requeue", entry.outbox_id, env=env),
                              f"outbox entry {entry.outbox_id} was not requeued", "is still running")
        assert await db.fetchrow(ENTRY_AND_LEDGER, entry.outbox_id) == before
        # Once the run has closed, the same requeue goes through.
        entry.resume_workflows()
        await requeue_outbox_entry(entry.outbox_id, client=dev_env.client, settings=settings)
        await settled(db, entry.key, timeout=60)
    assert len(welcomes_to(mailgun, "stuck@example.com")) == 1

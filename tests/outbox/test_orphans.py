"""An entry whose delivery run closed without finishing it is aborted by the watchdog, not lost.

A delivery terminated by an operator (or failed, or timed out, in a way the workflow does not
handle) leaves its entry `sending`, or `failed` in a retry's backoff. Every
PRESSROOM_ORPHAN_CHECK_SECONDS the relay asks Temporal about the entries that have not changed for that
long: a run that is closed, or that does not exist, has its entry aborted with DELIVERY_CLOSED.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import ActivityEnvironment

from activities.outbox import enqueue, outbox_workflow_id
from activities.outbox.delivery import LEDGER_FAILED, UNFINISHED_ENTRIES, OutboxDeliveryActivities
from activities.outbox.models import EntryInput
from activities.watchdog import Watchdog
from operations.members import add_member
from operations.outbox import ensure_relay, requeue_outbox_entry
from pressroom.dependencies import Dependencies
from tests.conftest import make_settings
from tests.newsletter.test_failures import wait_until
from tests.outbox.test_outbox import WELCOME, entry_state, settled, welcomes_to
from worker import running_worker
from workflows.outbox import RELAY_WORKFLOW_ID

CHECK_SEC = 0.5
LATENCY_SEC = 3.0  # a send in flight this long: under the confirm window, so its look-up can find it


async def send_in_flight(db, member_id: str) -> None:
    """Until the member's welcome email has been recorded as going out (its request is in flight)."""
    async def sending() -> bool:
        return bool(await db.fetchval("SELECT send_attempts FROM automated_email_recipients WHERE member_id = $1",
                                      member_id))
    await wait_until(sending, timeout=60)


async def entry(db, key: str):
    return await db.fetchrow("SELECT id, status, attempts, last_error_code, last_error_msg FROM outbox "
                             "WHERE idempotency_key = $1", key)


async def an_entry_without_a_run(db) -> str:
    """A `sending` entry whose delivery run does not exist (as after the namespace's retention):
    committed `sending`, so that no relay claims it. Its abort shows that a check has run."""
    async with db.acquire() as conn, conn.transaction():
        key = await enqueue(conn, "NoopEvent", {"entry": uuid.uuid4().hex})
        await conn.execute("UPDATE outbox SET status = 'sending', updated_at = now() - interval '1 minute' "
                           "WHERE idempotency_key = $1", key)
    return key


async def checked_once_more(db) -> None:
    """Until a check that started after this call has aborted an entry without a run."""
    key = await an_entry_without_a_run(db)
    await settled(db, key, "aborted", timeout=30)
    row = await entry(db, key)
    assert row["last_error_code"] == "DELIVERY_CLOSED"
    assert row["last_error_msg"] == (f"its delivery run (workflow {outbox_workflow_id(key)}) does not exist (closed "
                                     "longer ago than the namespace keeps runs) without finishing the entry; "
                                     "requeue it to send it")


async def stop_relay(client, settings) -> None:
    await client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{settings.task_queue}").terminate()


async def test_a_delivery_terminated_mid_send_is_aborted_and_a_requeue_sends_it_once(
        db, mailgun, dev_env, outbox_settings):
    settings = outbox_settings(orphan_check_seconds=CHECK_SEC, send_confirm_window_seconds=10)
    address = "terminated@example.com"
    await db.execute(WELCOME)
    # Should the terminated attempt outlive its run (its cancellation comes with a heartbeat, late on a
    # busy machine), its send is answered 500, stored all the same: the attempt finishes nothing, and
    # the entry is the watchdog's to abort however the race goes.
    mailgun.set_faults(latency_ms=LATENCY_SEC * 1000, error_after_accept_rate=1.0)
    async with running_worker(dev_env.client, settings):
        await ensure_relay(dev_env.client, settings)
        added = await add_member(address, welcome=True, settings=settings)
        await send_in_flight(db, added.member_id)
        in_flight_since = asyncio.get_running_loop().time()
        delivery = dev_env.client.get_workflow_handle(outbox_workflow_id(added.welcome_key))
        await delivery.terminate(reason="an operator stops it")
        assert await entry_state(db, added.welcome_key) == "sending"

        await settled(db, added.welcome_key, "aborted", timeout=30)
        aborted = await entry(db, added.welcome_key)
        assert aborted["last_error_code"] == "DELIVERY_CLOSED"
        assert aborted["last_error_msg"] == (f"its delivery run (workflow {delivery.id}) closed as TERMINATED "
                                             "(an operator stops it) "
                                             "without finishing the entry; requeue it to send it")
        assert address not in aborted["last_error_msg"]
        assert await db.fetchval("SELECT error_code FROM idempotency_ledger WHERE idempotency_key = $1",
                                 added.welcome_key) == "DELIVERY_CLOSED"

        mailgun.set_faults(latency_ms=0, error_after_accept_rate=0.0)
        await requeue_outbox_entry(aborted["id"], client=dev_env.client, settings=settings)
        await settled(db, added.welcome_key, timeout=60)
        # The entry's row settles a moment before its run closes: wait for the run, not for a guess.
        await asyncio.wait_for(delivery.result(), timeout=60)
        await stop_relay(dev_env.client, settings)
    # The terminated attempt's request may still be held by the simulator: count once it cannot be.
    await asyncio.sleep(max(0.0, in_flight_since + LATENCY_SEC + 1 - asyncio.get_running_loop().time()))
    assert len(welcomes_to(mailgun, address)) == 1
    assert (await describe(dev_env.client, added.welcome_key)).status == WorkflowExecutionStatus.COMPLETED


async def describe(client, key: str):
    return await client.get_workflow_handle(outbox_workflow_id(key)).describe()


async def test_a_delivery_still_sending_is_left_alone(db, mailgun, dev_env, outbox_settings):
    settings = outbox_settings(orphan_check_seconds=CHECK_SEC)
    address = "slow@example.com"
    await db.execute(WELCOME)
    mailgun.set_faults(latency_ms=12_000)  # the send is in flight through several checks
    async with running_worker(dev_env.client, settings):
        await ensure_relay(dev_env.client, settings)
        added = await add_member(address, welcome=True, settings=settings)
        await send_in_flight(db, added.member_id)
        await asyncio.sleep(2 * CHECK_SEC)  # the entry is old enough to be looked at
        await checked_once_more(db)
        assert (await entry(db, added.welcome_key))["status"] == "sending"
        assert (await describe(dev_env.client, added.welcome_key)).status == WorkflowExecutionStatus.RUNNING
        mailgun.set_faults(latency_ms=0)
        await settled(db, added.welcome_key, timeout=60)
        await stop_relay(dev_env.client, settings)
    assert len(welcomes_to(mailgun, address)) == 1


async def test_a_delivery_in_its_backoff_is_left_alone_and_aborted_once_terminated(
        db, mailgun, dev_env, postgres_url):
    settings = make_settings(postgres_url, mailgun, orphan_check_seconds=CHECK_SEC, outbox_backoff_seconds=[60],
                             outbox_poll_interval_seconds=0.2)
    address = "backoff@example.com"
    await db.execute(WELCOME)
    mailgun.set_faults(error_rate=1.0)  # 500, not stored: the first attempt fails, the next waits 60 s
    async with running_worker(dev_env.client, settings):
        await ensure_relay(dev_env.client, settings)
        added = await add_member(address, welcome=True, settings=settings)
        await settled(db, added.welcome_key, "failed", timeout=60)
        await asyncio.sleep(2 * CHECK_SEC)
        await checked_once_more(db)
        waiting = await entry(db, added.welcome_key)
        assert waiting["status"] == "failed" and waiting["attempts"] == 1
        assert (await describe(dev_env.client, added.welcome_key)).status == WorkflowExecutionStatus.RUNNING

        await dev_env.client.get_workflow_handle(outbox_workflow_id(added.welcome_key)).terminate()
        await settled(db, added.welcome_key, "aborted", timeout=30)
        assert "closed as TERMINATED" in (await entry(db, added.welcome_key))["last_error_msg"]
        mailgun.set_faults(error_rate=0.0)
        await requeue_outbox_entry(waiting["id"], client=dev_env.client, settings=settings)
        await settled(db, added.welcome_key, timeout=60)
        await stop_relay(dev_env.client, settings)
    assert len(welcomes_to(mailgun, address)) == 1


class UnreachableTemporal:
    """A client whose every describe fails as an unreachable frontend does."""

    def get_workflow_handle(self, workflow_id: str, **_):
        return self

    async def describe(self, **_):
        raise RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b"")


async def test_a_check_that_cannot_reach_temporal_skips_the_entry(db, db_pool, outbox_settings):
    """One piece, with a stand-in Temporal: the entry is not aborted, and nothing is raised."""
    settings = outbox_settings(orphan_check_seconds=CHECK_SEC)
    key = await an_entry_without_a_run(db)
    watchdog = Watchdog(db_pool, UnreachableTemporal(), settings.orphan_check_seconds)
    assert await ActivityEnvironment().run(watchdog.check, UNFINISHED_ENTRIES) is None
    assert await entry_state(db, key) == "sending"


async def test_an_attempt_that_outlived_its_run_does_not_reopen_the_entry(db, db_pool, outbox_settings):
    """One piece: a handler still running after its run was terminated fails once the check has
    aborted its entry; the entry stays aborted, with the check's reason."""
    key = await an_entry_without_a_run(db)
    outbox_id = (await entry(db, key))["id"]
    activities = OutboxDeliveryActivities(Dependencies(settings=outbox_settings(), pool=db_pool, provider=None,
                                               temporal=UnreachableTemporal()))

    async def aborted_meanwhile_then_fails(event, key, input) -> dict:
        await db.execute("UPDATE outbox SET status = 'aborted', last_error_code = 'DELIVERY_CLOSED' WHERE id = $1",
                         input.outbox_id)
        raise ConnectionError("the provider went away")

    activities.handlers["NoopEvent"] = aborted_meanwhile_then_fails
    with pytest.raises(ApplicationError, match="the provider went away"):
        await ActivityEnvironment().run(activities.handle_entry, EntryInput(outbox_id=outbox_id))
    row = await entry(db, key)
    assert (row["status"], row["last_error_code"], row["attempts"]) == ("aborted", "DELIVERY_CLOSED", 0)


async def test_an_attempt_that_outlived_its_run_does_not_finish_the_entry_the_check_aborted(
        db, db_pool, outbox_settings):
    """One piece: a handler that succeeds after the check aborted its entry records nothing (the
    delivery's own step would, were its run open); the entry stays aborted and the ledger failed."""
    key = await an_entry_without_a_run(db)
    outbox_id = (await entry(db, key))["id"]
    activities = OutboxDeliveryActivities(Dependencies(settings=outbox_settings(), pool=db_pool, provider=None,
                                               temporal=UnreachableTemporal()))

    async def aborted_meanwhile_then_succeeds(event, key, input) -> dict:
        async with db.acquire() as conn, conn.transaction():
            await conn.execute(LEDGER_FAILED, input.outbox_id, "DELIVERY_CLOSED")
            await conn.execute("UPDATE outbox SET status = 'aborted', last_error_code = 'DELIVERY_CLOSED' "
                               "WHERE id = $1", input.outbox_id)
        return {"sent": True}

    activities.handlers["NoopEvent"] = aborted_meanwhile_then_succeeds
    result = await ActivityEnvironment().run(activities.handle_entry, EntryInput(outbox_id=outbox_id, complete=True))
    assert (result.result, result.completed) == ({"sent": True}, False)
    assert (await entry(db, key))["status"] == "aborted"
    assert await db.fetchval("SELECT status FROM idempotency_ledger WHERE idempotency_key = $1", key) == "failed"


async def test_a_handled_entry_is_recorded_by_its_handlers_activity(db, db_pool, outbox_settings):
    """One piece: with `complete`, the activity that ran the handler writes the ledger line and the
    entry's state itself, so the delivery needs no step after it."""
    key = await an_entry_without_a_run(db)
    outbox_id = (await entry(db, key))["id"]
    activities = OutboxDeliveryActivities(Dependencies(settings=outbox_settings(), pool=db_pool, provider=None,
                                               temporal=UnreachableTemporal()))
    result = await ActivityEnvironment().run(activities.handle_entry, EntryInput(outbox_id=outbox_id, complete=True))
    assert (result.result, result.completed) == ({}, True)
    assert (await entry(db, key))["status"] == "succeeded"
    assert await db.fetchval("SELECT status FROM idempotency_ledger WHERE idempotency_key = $1", key) == "succeeded"

"""The outbox end to end: enqueue in a transaction, relay, delivery, ledger.

The tests are named after the protocol's cases W-101…W-105 (docs/operating.md "The outbox").
"""

from __future__ import annotations

import asyncio
import json
import signal

import pytest
from temporalio.worker import Replayer

from activities.outbox import enqueue, payload_digest
from operations.members import add_member
from operations.outbox import ensure_relay, outbox_entry, outbox_status, requeue_outbox_entry
from pressroom.temporal import data_converter
from tests.adversaries import each_adversary, play
from tests.foundation.test_cli import assert_one_line_error, pressroom
from tests.newsletter.test_failures import spawn_worker, wait_until
from worker import running_worker
from workflows.outbox import RELAY_WORKFLOW_ID, DeliverOutboxEntryWorkflow

WELCOME = ("INSERT INTO automated_emails (name, slug, subject, html) VALUES "
           "('Welcome', 'member-welcome-email-free', 'Welcome!', '<p>Welcome %recipient.name%</p>')")


async def entry_state(db, key: str) -> str | None:
    return await db.fetchval("SELECT status FROM outbox WHERE idempotency_key = $1", key)


async def settled(db, key: str, state: str = "succeeded", timeout: float = 90) -> None:
    async def done() -> bool:
        return await entry_state(db, key) == state
    await wait_until(done, timeout)


async def test_w101_a_new_member_gets_one_welcome_email(db, mailgun, relay, dev_env):
    await db.execute(WELCOME)
    added = await add_member("new.reader@example.com", "New Reader", welcome=True, settings=relay)
    await settled(db, added.welcome_key)
    messages = [m for m in mailgun.messages if "new.reader@example.com" in m.recipients]
    assert len(messages) == 1 and messages[0].subject == "Welcome!"
    assert messages[0].recipient_variables()["new.reader@example.com"]["name"] == "New Reader"
    ledger = await db.fetchrow("SELECT status, result FROM idempotency_ledger WHERE idempotency_key = $1",
                               added.welcome_key)
    assert ledger["status"] == "succeeded" and json.loads(ledger["result"])["provider_id"] == messages[0].id
    assert await db.fetchval("SELECT count(*) FROM automated_email_recipients WHERE member_id = $1",
                             added.member_id) == 1
    handle = dev_env.client.get_workflow_handle(f"outbox-{added.welcome_key}")
    assert await handle.result() == "succeeded"
    await Replayer(workflows=[DeliverOutboxEntryWorkflow], data_converter=data_converter()).replay_workflow(
        await handle.fetch_history())


async def test_w102_a_failure_then_success(db, mailgun, relay):
    await db.execute(WELCOME)
    mailgun.set_faults(error_rate=1.0)
    added = await add_member("flaky@example.com", welcome=True, settings=relay)

    async def failed_once() -> bool:
        return (await db.fetchval("SELECT attempts FROM outbox WHERE idempotency_key = $1", added.welcome_key)) >= 1
    await wait_until(failed_once)
    mailgun.set_faults(error_rate=0.0)
    await settled(db, added.welcome_key)
    row = await outbox_entry(await db.fetchval("SELECT id FROM outbox WHERE idempotency_key = $1", added.welcome_key),
                             settings=relay)
    assert row["last_error_code"] == "ProviderUnavailable" and row["ledger"] == "succeeded"
    assert row["attempts"] >= 2  # the failed ones, and the one that succeeded
    assert sum("flaky@example.com" in m.recipients for m in mailgun.messages) == 1


def welcomes_to(mailgun, address: str) -> list:
    return [m for m in mailgun.messages if address in m.recipients]


@each_adversary
async def test_a_welcome_email_whose_answer_was_lost_is_confirmed_not_resent(adversary, db, mailgun, relay):
    await db.execute(WELCOME)
    play(mailgun, adversary, lost_response_rate=1.0)  # every send is stored, then the connection drops
    added = await add_member("lost.answer@example.com", welcome=True, settings=relay)
    await settled(db, added.welcome_key)
    sent = welcomes_to(mailgun, "lost.answer@example.com")
    assert len(sent) == 1 and sent[0].variables["pressroom-outbox"] == added.welcome_key
    recorded = await db.fetchrow("SELECT provider_id, send_outcome FROM automated_email_recipients "
                                 "WHERE member_id = $1", added.member_id)
    assert recorded["provider_id"] == sent[0].id and recorded["send_outcome"] == "accepted"


@each_adversary
async def test_a_lost_welcome_email_aborted_then_requeued_is_sent_once(adversary, db, mailgun, dev_env,
                                                                      outbox_settings):
    """No retries left after the lost answer: the entry aborts; `outbox requeue` looks the send up first."""
    settings = outbox_settings(outbox_max_attempts=1)
    await db.execute(WELCOME)
    play(mailgun, adversary, lost_response_rate=1.0)
    async with running_worker(dev_env.client, settings):
        await ensure_relay(dev_env.client, settings)
        added = await add_member("requeued@example.com", welcome=True, settings=settings)
        await settled(db, added.welcome_key, "aborted")
        outbox_id = await db.fetchval("SELECT id FROM outbox WHERE idempotency_key = $1", added.welcome_key)
        play(mailgun, adversary)
        for _ in range(5):
            await requeue_outbox_entry(outbox_id, client=dev_env.client, settings=settings)
            await wait_until(lambda: settled_in(db, added.welcome_key, ("succeeded", "aborted")), timeout=90)
            # With one attempt allowed, the rate-limiting adversary may refuse the requeued send
            # too (429, certainly not accepted): the operator requeues it again.
            if await db.fetchval("SELECT last_error_code FROM outbox WHERE id = $1 AND status = 'aborted'",
                                 outbox_id) != "ProviderRateLimited":
                break
        await settled(db, added.welcome_key)
        await dev_env.client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{settings.task_queue}").terminate()
    assert len(welcomes_to(mailgun, "requeued@example.com")) == 1


async def settled_in(db, key: str, states: tuple[str, ...]) -> bool:
    return await entry_state(db, key) in states


@pytest.mark.crash
async def test_w103_a_worker_killed_mid_delivery_another_completes(db, mailgun, dev_env, outbox_settings):
    settings = outbox_settings()
    await db.execute(WELCOME)
    mailgun.set_faults(latency_ms=3000)
    worker = spawn_worker(settings, dev_env, PRESSROOM_OUTBOX_BACKOFF_SECONDS="1",
                          PRESSROOM_OUTBOX_POLL_INTERVAL_SECONDS="0.2")
    try:
        added = await add_member("slow@example.com", welcome=True, settings=settings)
        await wait_until(lambda: asyncio.sleep(0, mailgun.request_counts["messages"] > 0), worker=worker)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        mailgun.set_faults(latency_ms=0)
        worker = spawn_worker(settings, dev_env, PRESSROOM_OUTBOX_BACKOFF_SECONDS="1",
                              PRESSROOM_OUTBOX_POLL_INTERVAL_SECONDS="0.2")
        await settled(db, added.welcome_key, timeout=90)
    finally:
        worker.terminate()
        worker.wait()
        await dev_env.client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{settings.task_queue}").terminate()
    assert await db.fetchval("SELECT count(*) FROM idempotency_ledger WHERE idempotency_key = $1",
                             added.welcome_key) == 1
    assert sum("slow@example.com" in m.recipients for m in mailgun.messages) == 1


async def test_w104_max_attempts_then_requeue_then_success(db, mailgun, dev_env, outbox_settings):
    # Without a confirm window an uncertain send (a 500) is resent at once: one send per attempt.
    settings = outbox_settings(outbox_max_attempts=3, send_confirm_window_seconds=0)
    await db.execute(WELCOME)
    mailgun.set_faults(error_rate=1.0)
    async with running_worker(dev_env.client, settings):
        await ensure_relay(dev_env.client, settings)
        added = await add_member("unlucky@example.com", welcome=True, settings=settings)
        await settled(db, added.welcome_key, "aborted")
        outbox_id = await db.fetchval("SELECT id FROM outbox WHERE idempotency_key = $1", added.welcome_key)
        aborted = await outbox_entry(outbox_id, settings=settings)
        assert aborted["attempts"] == 3 and aborted["last_error_code"] == "ProviderUnavailable"
        assert aborted["ledger"] == "failed" and "500" in aborted["last_error_msg"]
        # Aborted, it runs no more: no run time in the future.
        assert aborted["next_run_at"] <= await db.fetchval("SELECT now()")
        mailgun.set_faults(error_rate=0.0)
        await requeue_outbox_entry(outbox_id, client=dev_env.client, settings=settings)
        await settled(db, added.welcome_key)
        await dev_env.client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{settings.task_queue}").terminate()
    assert sum("unlucky@example.com" in m.recipients for m in mailgun.messages) == 1
    assert await db.fetchval("SELECT attempts FROM outbox WHERE id = $1", outbox_id) == 1  # requeued: afresh


async def test_w105_a_key_already_succeeded_is_not_handled_again(db, mailgun, relay):
    payload = {}
    await db.execute("INSERT INTO idempotency_ledger (idempotency_key, payload_digest, status, result) "
                     "VALUES ('done-before', $1, 'succeeded', '{}')", payload_digest(payload))
    await db.execute("INSERT INTO idempotency_ledger (idempotency_key, payload_digest, status) "
                     "VALUES ('other-payload', 'not-this-digest', 'succeeded')")
    async with db.acquire() as conn, conn.transaction():
        await enqueue(conn, "NoopEvent", payload, idempotency_key="done-before")
        await enqueue(conn, "NoopEvent", payload, idempotency_key="other-payload")
    await settled(db, "done-before")
    await settled(db, "other-payload", "aborted")
    assert await db.fetchval("SELECT last_error_code FROM outbox WHERE idempotency_key = 'other-payload'") \
        == "IDEMPOTENCY_CONFLICT"
    assert mailgun.stats()["messages"] == 0


async def test_a_succeeded_entry_is_deleted_when_asked_and_its_ledger_line_kept(db, dev_env, outbox_settings):
    settings = outbox_settings(outbox_delete_on_success=True)
    async with running_worker(dev_env.client, settings):
        await ensure_relay(dev_env.client, settings)
        async with db.acquire() as conn, conn.transaction():
            key = await enqueue(conn, "NoopEvent", {"n": 3})

        async def deleted() -> bool:
            return await db.fetchval("SELECT count(*) FROM outbox WHERE idempotency_key = $1", key) == 0
        await wait_until(deleted, timeout=90)
        # The handler's activity deletes the row before its run closes: wait for the run while a
        # worker is still there to close it.
        delivered = await asyncio.wait_for(dev_env.client.get_workflow_handle(f"outbox-{key}").result(), 60)
        await dev_env.client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{settings.task_queue}").terminate()
    assert await db.fetchval("SELECT status FROM idempotency_ledger WHERE idempotency_key = $1", key) == "succeeded"
    assert delivered == "succeeded"


async def test_a_failed_delete_is_completed_with_the_reason_and_logged(db, dev_env, outbox_settings, caplog):
    settings = outbox_settings(outbox_delete_on_success=True)
    await db.execute("""
        CREATE OR REPLACE FUNCTION refuse_outbox_delete() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'deletes are refused here'; END $$;
        CREATE TRIGGER refuse_outbox_delete BEFORE DELETE ON outbox FOR EACH ROW
        EXECUTE FUNCTION refuse_outbox_delete();""")
    try:
        async with running_worker(dev_env.client, settings):
            await ensure_relay(dev_env.client, settings)
            async with db.acquire() as conn, conn.transaction():
                key = await enqueue(conn, "NoopEvent", {"n": "undeletable"})
            await settled(db, key, "completed")
            await dev_env.client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{settings.task_queue}").terminate()
    finally:
        await db.execute("DROP TRIGGER refuse_outbox_delete ON outbox")
    row = await db.fetchrow("SELECT id, last_error_msg FROM outbox WHERE idempotency_key = $1", key)
    assert row["last_error_msg"] == "Processed, but failed to delete outbox entry"
    assert any(f"outbox entry {row['id']}: Processed, but failed to delete outbox entry" in record.getMessage()
               for record in caplog.records)
    assert await db.fetchval("SELECT status FROM idempotency_ledger WHERE idempotency_key = $1", key) == "succeeded"


LEDGER_ROW = "SELECT row_to_json(l)::text FROM idempotency_ledger l WHERE idempotency_key = $1"


async def test_a_conflict_with_a_failed_ledger_line_never_changes_it(db, mailgun, relay):
    """The ledger is the source of truth: aborting the outbox row for a conflict leaves it byte for byte."""
    await db.execute("INSERT INTO idempotency_ledger (idempotency_key, payload_digest, status, error_code, "
                     "updated_at) VALUES ('failed-before', 'another-digest', 'failed', 'MAILGUN_REJECTED', "
                     "'2026-01-02T03:04:05.678901+00')")
    before = await db.fetchval(LEDGER_ROW, "failed-before")
    async with db.acquire() as conn, conn.transaction():
        await enqueue(conn, "NoopEvent", {"n": 2}, idempotency_key="failed-before")
    await settled(db, "failed-before", "aborted")
    assert await db.fetchval("SELECT last_error_code FROM outbox WHERE idempotency_key = 'failed-before'") \
        == "IDEMPOTENCY_CONFLICT"
    assert await db.fetchval(LEDGER_ROW, "failed-before") == before


async def test_a_rolled_back_transaction_leaves_no_entry(db):
    with pytest.raises(RuntimeError, match="the member change failed"):
        async with db.acquire() as conn, conn.transaction():
            await enqueue(conn, "NoopEvent", {}, idempotency_key="rolled-back")
            raise RuntimeError("the member change failed")
    assert await db.fetchval("SELECT count(*) FROM outbox") == 0


async def test_the_same_key_twice_is_delivered_once(db, dev_env, relay):
    for _ in range(2):
        async with db.acquire() as conn, conn.transaction():
            await enqueue(conn, "NoopEvent", {"n": 1})
    key = await db.fetchval("SELECT idempotency_key FROM outbox")
    await settled(db, key)
    assert await db.fetchval("SELECT count(*) FROM outbox") == 1
    runs = [w async for w in dev_env.client.list_workflows(f"WorkflowId = 'outbox-{key}'")]
    assert len(runs) == 1


@pytest.mark.slow
async def test_two_relays_and_a_burst_start_each_entry_once(db, dev_env, outbox_settings):
    settings = outbox_settings(outbox_batch=50)
    async with db.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO outbox (event_type, payload, idempotency_key, payload_digest) "
            "SELECT 'NoopEvent', '{}', 'burst-' || n, $1 FROM generate_series(1, 500) n", payload_digest({}))
    async with running_worker(dev_env.client, settings):
        second = settings.model_copy(update={"task_queue": settings.task_queue})
        await ensure_relay(dev_env.client, settings)
        await dev_env.client.start_workflow("OutboxRelayWorkflow", {"run_seconds": 300},
                                            id=f"second-relay-{settings.task_queue}", task_queue=second.task_queue)

        async def drained() -> bool:
            return await db.fetchval("SELECT count(*) FROM outbox WHERE status = 'succeeded'") == 500
        await wait_until(drained, timeout=240)
        for relay_id in (f"{RELAY_WORKFLOW_ID}-{settings.task_queue}", f"second-relay-{settings.task_queue}"):
            await dev_env.client.get_workflow_handle(relay_id).terminate()
    starts = await db.fetchval("SELECT count(*) FROM idempotency_ledger WHERE idempotency_key LIKE 'burst-%'")
    assert starts == 500
    assert (await outbox_status(settings=settings)).counts == {"succeeded": 500}


@pytest.mark.parametrize("event_type, payload, code, words", [
    ("NoSuchEvent", {}, "UNKNOWN_EVENT_TYPE", "no handler for event type 'NoSuchEvent'"),
    ("MemberCreatedEvent", {"member": 1}, "INVALID_PAYLOAD", "member_id: Field required"),
])
async def test_bad_events_are_aborted_with_a_clear_message(db, mailgun, relay, event_type, payload, code, words):
    async with db.acquire() as conn, conn.transaction():
        key = await enqueue(conn, event_type, payload)
    await settled(db, key, "aborted")
    row = await db.fetchrow("SELECT attempts, last_error_code, last_error_msg FROM outbox")
    assert row["last_error_code"] == code and words in row["last_error_msg"] and row["attempts"] == 0
    assert mailgun.stats()["messages"] == 0
    assert await db.fetchval("SELECT count(*) FROM members") == 0


async def test_cli_bad_input_is_one_line(postgres_url, db):
    env = {"DATABASE_URL": postgres_url}
    assert_one_line_error(await asyncio.to_thread(pressroom, "members", "add", "not-an-address", env=env),
                          "is not an e-mail address")
    assert_one_line_error(await asyncio.to_thread(pressroom, "outbox", "show", "nope", env=env),
                          "outbox entry nope does not exist")
    assert_one_line_error(await asyncio.to_thread(pressroom, "outbox", "requeue", "nope", env=env),
                          "outbox entry nope does not exist")

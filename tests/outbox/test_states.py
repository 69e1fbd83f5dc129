"""Outbox states under the worker protocol's names, traced as PostgreSQL records every change."""

from __future__ import annotations

import pytest

from operations.members import add_member
from operations.outbox import ensure_relay, requeue_outbox_entry
from tests.newsletter.test_failures import wait_until
from tests.outbox.test_outbox import WELCOME, settled
from worker import running_worker
from workflows.outbox import RELAY_WORKFLOW_ID

TRACE = """
CREATE TABLE outbox_trace (n bigserial PRIMARY KEY, outbox_id text, status text);
CREATE FUNCTION outbox_trace() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM NEW.status THEN
        INSERT INTO outbox_trace (outbox_id, status) VALUES (NEW.id, NEW.status);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_trace AFTER INSERT OR UPDATE ON outbox FOR EACH ROW EXECUTE FUNCTION outbox_trace();
"""


@pytest.fixture
async def traced(db):
    """Every state an outbox row takes, in order (the session's database is shared: removed after)."""
    await db.execute(TRACE)
    yield
    await db.execute("DROP TABLE outbox_trace; DROP FUNCTION outbox_trace() CASCADE")


async def trace(db, key: str) -> list[str]:
    rows = await db.fetch("SELECT t.status FROM outbox_trace t JOIN outbox o ON o.id = t.outbox_id "
                          "WHERE o.idempotency_key = $1 ORDER BY t.n", key)
    return [row["status"] for row in rows]


async def test_w101_an_entry_goes_pending_sending_succeeded(db, mailgun, traced, relay):
    await db.execute(WELCOME)
    added = await add_member("plain@example.com", welcome=True, settings=relay)
    await settled(db, added.welcome_key)
    assert await trace(db, added.welcome_key) == ["pending", "sending", "succeeded"]


async def test_w102_a_retried_entry_goes_failed_then_sending_again(db, mailgun, traced, relay):
    await db.execute(WELCOME)
    mailgun.set_faults(error_rate=1.0)
    added = await add_member("retried@example.com", welcome=True, settings=relay)

    async def failed_once() -> bool:
        return "failed" in await trace(db, added.welcome_key)
    await wait_until(failed_once)
    mailgun.set_faults(error_rate=0.0)
    await settled(db, added.welcome_key)
    states = await trace(db, added.welcome_key)
    retries = (len(states) - 3) // 2
    assert retries >= 1 and states == ["pending"] + ["sending", "failed"] * retries + ["sending", "succeeded"]


async def test_w104_an_entry_out_of_attempts_is_aborted_and_a_requeue_goes_through_pending(
        db, mailgun, traced, dev_env, outbox_settings):
    settings = outbox_settings(outbox_max_attempts=2)
    await db.execute(WELCOME)
    # A refusal Mailgun documents as certain (429): each attempt is a plain retry, with no look-up
    # round in between, so the trace shows exactly the attempts the setting allows.
    mailgun.set_faults(rate_limit_rate=1.0, retry_after_seconds=0)
    async with running_worker(dev_env.client, settings):
        await ensure_relay(dev_env.client, settings)
        added = await add_member("requeued@example.com", welcome=True, settings=settings)
        await settled(db, added.welcome_key, "aborted")
        mailgun.set_faults(rate_limit_rate=0.0)
        await requeue_outbox_entry(await db.fetchval("SELECT id FROM outbox WHERE idempotency_key = $1",
                                                     added.welcome_key), client=dev_env.client, settings=settings)
        await settled(db, added.welcome_key)
        await dev_env.client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{settings.task_queue}").terminate()
    assert await trace(db, added.welcome_key) == ["pending", "sending", "failed", "sending", "failed", "aborted",
                                                  "pending", "sending", "succeeded"]

"""A broken welcome template pauses, it does not abort: every member queued while it is broken
waits (counted, with the reason, in `outbox status`) and is welcomed once it is fixed, exactly once
and with no requeue by hand. A welcome with nothing to send reads `skipped`, with why; `outbox
requeue` takes a filter (state and reason)."""

from __future__ import annotations

import json
import os
import re

import pytest

from activities.outbox import enqueue
from operations.members import add_member
from operations.outbox import ensure_relay, outbox_status, requeue_outbox_entries, requeue_outbox_entry
from pressroom.errors import BadInput
from tests.conftest import make_settings
from tests.newsletter.test_failures import wait_until
from tests.operations.test_waiting import cli, cli_env
from tests.outbox.test_outbox import WELCOME, settled
from worker import running_worker
from workflows.outbox import RELAY_WORKFLOW_ID

BROKEN = "UPDATE automated_emails SET subject = E'Welcome\\r\\nBcc: all@hostile.example'"


@pytest.fixture
async def relay(dev_env, postgres_url, mailgun, db):
    """A worker and the relay; a waiting welcome is tried again a second later."""
    settings = make_settings(postgres_url, mailgun, outbox_backoff_seconds=[1], outbox_poll_interval_seconds=0.2,
                             welcome_template_retry_seconds=1)
    async with running_worker(dev_env.client, settings):
        await ensure_relay(dev_env.client, settings)
        yield settings
        await dev_env.client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{settings.task_queue}").terminate()


def welcomes(mailgun, address: str) -> int:
    return sum(address in m.recipients for m in mailgun.messages)


async def test_broken_then_fixed_template_every_queued_member_welcomed_once(db, mailgun, relay, dev_env):
    await db.execute(WELCOME)
    await db.execute(BROKEN)
    added = [await add_member(f"queued{n}@example.com", welcome=True, settings=relay) for n in range(3)]

    async def all_waiting() -> bool:
        return await db.fetchval("SELECT count(*) FROM outbox WHERE status = 'pending' "
                                 "AND last_error_code = 'WELCOME_TEMPLATE'") == 3
    await wait_until(all_waiting, 60)
    # Tried again every second, each entry is now and then being tried (sending) rather than waiting.
    status = await outbox_status(relay)
    [waiting] = status.waiting
    assert 1 <= waiting.count <= 3 and waiting.code == "WELCOME_TEMPLATE"
    assert "subject holds a line break or control character" in (waiting.reason or "")
    assert "aborted" not in status.counts and mailgun.messages == []
    env = {**os.environ, "DATABASE_URL": relay.database_url}
    code, out, _err = await cli("outbox", "status", env=env)
    assert code == 0 and re.search(r"^pending, waiting: [123] \(WELCOME_TEMPLATE\) the automated email", out, re.M)
    # Its delivery holds it: a requeue has nothing to do.
    with pytest.raises(BadInput, match="goes out on its own once what it waits for is fixed"):
        await requeue_outbox_entry(added[0].outbox_id if hasattr(added[0], "outbox_id") else
                                   await db.fetchval("SELECT id FROM outbox WHERE idempotency_key = $1",
                                                     added[0].welcome_key), settings=relay)

    await db.execute("UPDATE automated_emails SET subject = 'Welcome!', updated_at = now()")
    for member in added:
        await settled(db, member.welcome_key)
    assert [welcomes(mailgun, f"queued{n}@example.com") for n in range(3)] == [1, 1, 1]
    assert (await outbox_status(relay)).waiting == []


async def test_a_welcome_with_nothing_to_send_is_skipped_with_why_and_requeued_by_filter(db, mailgun, relay,
                                                                                          dev_env):
    inactive = await add_member("inactive@example.com", welcome=True, settings=relay)  # no welcome email at all yet
    await settled(db, inactive.welcome_key, "skipped")
    async with db.acquire() as conn, conn.transaction():  # a member deleted before their welcome was handled
        gone_key = await enqueue(conn, "MemberCreatedEvent", {"member_id": "gone"},
                                 idempotency_key="member-created-gone")
    await settled(db, gone_key, "skipped")
    rows = {r["idempotency_key"]: (r["last_error_code"], r["last_error_msg"]) for r in await db.fetch(
        "SELECT idempotency_key, last_error_code, last_error_msg FROM outbox")}
    assert rows[inactive.welcome_key] == ("WELCOME_INACTIVE",
                                          "no active welcome email member-welcome-email-free for free members "
                                          "(`pressroom automations enable welcome-free` turns it on)")
    assert rows[gone_key] == ("MEMBER_DELETED", "member gone was deleted before the welcome email")
    assert {(g.code, g.count) for g in (await outbox_status(relay)).skipped} == \
        {("WELCOME_INACTIVE", 1), ("MEMBER_DELETED", 1)}

    # The site makes its welcome email: the skipped one is sent by filter, once; the deleted one is not named.
    await db.execute(WELCOME)
    env = cli_env(relay, dev_env)
    code, out, err = await cli("outbox", "requeue", "--state", "skipped", "--reason", "WELCOME_INACTIVE", "--json",
                               env=env)
    assert code == 0, err
    [outbox_id] = json.loads(out)["requeued"]
    await settled(db, inactive.welcome_key)
    assert welcomes(mailgun, "inactive@example.com") == 1
    assert (await requeue_outbox_entries("skipped", "WELCOME_INACTIVE", settings=relay)).requeued == []
    with pytest.raises(BadInput, match="--state 'succeeded' is not one of aborted, skipped"):
        await requeue_outbox_entries("succeeded", settings=relay)
    code, out, err = await cli("outbox", "requeue", outbox_id, "--state", "aborted", env=env)
    assert code == 1 and "not both" in err

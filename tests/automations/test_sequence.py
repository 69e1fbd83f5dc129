"""A three-email, seven-day sequence on the time-skipping server with the real activities (PostgreSQL,
the Mailgun simulator); members who leave mid-way stop with the reason; a killed worker sends nothing twice."""

from __future__ import annotations

import asyncio
import json
import signal
import uuid

import pytest

from operations.automations import automation_runs, create_sequence, enter_member, set_automation_status
from operations.members import delete_member, member_profile
from pressroom.store.members import leave
from tests.conftest import make_settings
from tests.newsletter.test_failures import spawn_worker, wait_until
from worker import running_worker

DAY = 24.0
SEQUENCE = [
    {"type": "send_email", "subject": "Day 0: welcome", "html": "<p>Hello %recipient.name%</p>"},
    {"type": "wait", "wait_hours": 3 * DAY},
    {"type": "send_email", "subject": "Day 3: follow-up", "html": '<p>Read <a href="https://example.com/a">this</a></p>'},
    {"type": "wait", "wait_hours": 4 * DAY},
    {"type": "send_email", "subject": "Day 7: an offer", "html": "<p>An offer</p>"},
]


async def add_reader(db, address: str, status: str = "free") -> str:
    member_id = await db.fetchval("INSERT INTO members (email, name, status) VALUES ($1, 'A Reader', $2) RETURNING id",
                                  address, status)
    newsletter = await db.fetchval("INSERT INTO newsletters (name, slug) VALUES ('Weekly', $1) RETURNING id",
                                   f"weekly-{uuid.uuid4().hex[:6]}")
    await db.execute("INSERT INTO members_newsletters (member_id, newsletter_id) VALUES ($1, $2)", member_id,
                     newsletter)
    return member_id


def subjects_to(mailgun, address: str) -> list[str]:
    return [m.subject for m in mailgun.messages if address in m.recipients]


@pytest.fixture
async def sequence_env(time_skipping_env, postgres_url, mailgun, db):
    settings = make_settings(postgres_url, mailgun)
    async with running_worker(time_skipping_env.client, settings):
        async with db.acquire() as conn:
            automation_id = await create_sequence(conn, f"sequence-{uuid.uuid4().hex[:6]}", "Onboarding", ["free"],
                                                  SEQUENCE)
        yield time_skipping_env, settings, automation_id


async def started(db, env, settings, automation_id: str, member_id: str):
    async with db.acquire() as conn:
        key = await enter_member(conn, automation_id, member_id, client=env.client, settings=settings)
    return env.client.get_workflow_handle(key)


async def finished(env, handle) -> str:
    """The run's result, its timers skipped while we wait (a handle not started by this client skips
    only inside `time_skipping_unlocked`)."""
    async with env.time_skipping_unlocked():
        return await handle.result()


async def first_email_sent(db, member_id: str) -> None:
    async def sent() -> bool:  # the first email's step finished and the wait begun
        return bool(await db.fetchval(
            "SELECT count(*) FROM automation_run_steps s JOIN automation_runs r ON r.id = s.run_id "
            "JOIN automation_actions a ON a.id = s.action_id WHERE r.member_id = $1 AND a.type = 'wait'", member_id))
    await wait_until(sent)


async def test_a_seven_day_three_email_sequence_runs_in_seconds(db, mailgun, sequence_env):
    env, settings, automation_id = sequence_env
    member_id = await add_reader(db, "seq@example.com")
    before = await env.get_current_time()
    handle = await started(db, env, settings, automation_id, member_id)
    assert await finished(env, handle) == "completed"
    assert (await env.get_current_time() - before).total_seconds() >= 7 * 86400
    assert subjects_to(mailgun, "seq@example.com") == ["Day 0: welcome", "Day 3: follow-up", "Day 7: an offer"]
    [run] = (await automation_runs(automation_id, settings=settings)).runs
    assert run.status == "completed" and [s.status for s in run.steps] == ["finished"] * 5
    [listed] = (await member_profile(member_id, settings=settings)).automation_runs  # `members show`
    assert listed.id == run.id and [s.type for s in listed.steps] == ["send_email", "wait"] * 2 + ["send_email"]
    # The footer's unsubscribe link and the tracked link, as every other email has them.
    follow_up = next(m for m in mailgun.messages if m.subject == "Day 3: follow-up")
    assert "unsubscribe_url" in follow_up.html and "/r/" in follow_up.html
    assert "/unsubscribe/?uuid=" in follow_up.recipient_variables()["seq@example.com"]["unsubscribe_url_html"]
    # Entered again by mistake: the same run, nothing sent again.
    again = await started(db, env, settings, automation_id, member_id)
    assert again.id == handle.id and await db.fetchval("SELECT count(*) FROM automation_runs") == 1
    assert len(subjects_to(mailgun, "seq@example.com")) == 3


async def _upgrade(db, settings, member_id):
    await db.execute("UPDATE members SET status = 'paid' WHERE id = $1", member_id)


async def _unsubscribe(db, settings, member_id):
    async with db.acquire() as conn:
        await leave(conn, member_id, None, "operator")


async def _delete(db, settings, member_id):
    await delete_member(member_id, settings=settings)


async def _disable(db, settings, member_id):
    automation_id = await db.fetchval("SELECT automation_id FROM automation_runs WHERE member_id = $1", member_id)
    await set_automation_status(automation_id, "inactive", settings=settings)


@pytest.mark.parametrize("change, reason", [(_upgrade, "member changed status"), (_unsubscribe, "member unsubscribed"),
                                            (_delete, "member deleted"), (_disable, "automation disabled")],
                         ids=["upgrade", "unsubscribe", "delete", "disable"])
async def test_a_member_who_leaves_mid_sequence_stops_with_the_reason(db, mailgun, sequence_env, change, reason):
    env, settings, automation_id = sequence_env
    address = f"{reason.split()[-1]}@example.com"
    member_id = await add_reader(db, address)
    handle = await started(db, env, settings, automation_id, member_id)
    await first_email_sent(db, member_id)  # the run now waits three days (not skipped until we ask)
    await change(db, settings, member_id)
    assert await finished(env, handle) == f"exited_early: {reason}"
    assert subjects_to(mailgun, address) == ["Day 0: welcome"]
    run = await db.fetchrow("SELECT id, status, exit_reason, member_id FROM automation_runs")
    assert (run["status"], run["exit_reason"]) == ("exited_early", reason)
    assert await db.fetchval("SELECT status FROM automation_run_steps WHERE run_id = $1 ORDER BY started_at DESC "
                             "LIMIT 1", run["id"]) == reason
    if reason == "member deleted":  # the delete promise holds: no address in the run's rows or history
        assert run["member_id"] is None
        history = json.dumps((await handle.fetch_history()).to_json_dict())
        assert address not in history and "A Reader" not in history
        assert await db.fetchval("SELECT count(*) FROM automated_email_recipients WHERE member_email <> ''") == 0


@pytest.mark.crash
async def test_a_worker_killed_between_acceptance_and_the_record_sends_each_email_once(db, mailgun, dev_env,
                                                                                       postgres_url):
    """Each member's first email is accepted by the provider while the step's record of it is held
    back (its row locked); the worker is killed then. The next worker finds each send uncertain,
    looks it up by its mark, and sends nothing twice."""
    settings = make_settings(postgres_url, mailgun)
    async with db.acquire() as conn:
        automation_id = await create_sequence(conn, "crash", "Crash", ["free"], [
            {"type": "send_email", "subject": "First", "html": "<p>One</p>"},
            {"type": "wait", "wait_hours": 0.0005},
            {"type": "send_email", "subject": "Second", "html": "<p>Two</p>"}])
    members = [await add_reader(db, f"crash{n}@example.com") for n in range(3)]
    mailgun.set_faults(latency_ms=1500)  # each send in flight long enough to hold its record back
    worker = spawn_worker(settings, dev_env)
    try:
        async with db.acquire() as conn:
            keys = [await enter_member(conn, automation_id, m, client=dev_env.client, settings=settings)
                    for m in members]

        async def all_uncertain() -> bool:  # recorded before the request went out
            return await db.fetchval("SELECT count(*) FROM automated_email_recipients "
                                     "WHERE send_outcome = 'uncertain'") == 3
        await wait_until(all_uncertain, worker=worker)
        async with db.acquire() as holder:
            held = holder.transaction()
            await held.start()
            await holder.execute("SELECT 1 FROM automated_email_recipients FOR UPDATE")
            await wait_until(lambda: asyncio.sleep(0, len(mailgun.messages) == 3), worker=worker)
            worker.send_signal(signal.SIGKILL)  # accepted at the provider, its record not yet written
            worker.wait()
            # The dead worker's statements still wait for the lock: they go with it, never written.
            await holder.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 "WHERE wait_event_type = 'Lock' AND query LIKE '%automated_email_recipients%' "
                                 "AND pid <> pg_backend_pid()")
            await held.rollback()
        mailgun.set_faults(latency_ms=0)
        worker = spawn_worker(settings, dev_env)
        for key in keys:
            assert await asyncio.wait_for(dev_env.client.get_workflow_handle(key).result(), 120) == "completed"
    finally:
        worker.terminate()
        worker.wait()
    for n in range(3):
        assert sorted(subjects_to(mailgun, f"crash{n}@example.com")) == ["First", "Second"]
    # Each first send was found in the provider's events, not sent again: one attempt each.
    assert [r["send_attempts"] for r in await db.fetch(
        "SELECT send_attempts FROM automated_email_recipients r "
        "JOIN automated_emails ae ON ae.id = r.automated_email_id WHERE ae.subject = 'First'")] == [1, 1, 1]

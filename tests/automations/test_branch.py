"""The one branch: a run waits up to 48 hours for a click on the email before and takes path A when
the member clicked (the front door's redirect signals the run), path B when they did not; a click
whose signal was lost still takes path A at the wait's end (the wait's end reads the click)."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from temporalio.api.enums.v1 import EventType

from devstack.link_followers import BROWSER
from devstack.servers import free_port
from frontdoor.server import FrontDoor
from operations.automations import automation_runs, create_sequence, show_automation
from pressroom import database
from tests.automations.test_commands import run
from tests.automations.test_sequence import add_reader, finished, started, subjects_to
from tests.conftest import make_settings
from tests.foundation.test_cli import assert_one_line_error
from tests.newsletter.test_failures import wait_until
from worker import running_worker

WAIT_HOURS = 48.0
BRANCHED = [
    {"type": "send_email", "subject": "Day 0: read this", "html": '<p>Read <a href="https://example.com/a">this</a></p>'},
    {"type": "wait_for_click", "wait_hours": WAIT_HOURS,
     "clicked": [{"type": "send_email", "subject": "Path A: more like it", "html": "<p>More</p>"}],
     "not_clicked": [{"type": "send_email", "subject": "Path B: did you see it?", "html": "<p>Again</p>"}]},
]
_TRACKED = re.compile(r'href="([^"]*/r/[^"]*)"')
_VARIABLE = re.compile(r"%recipient\.(\w+)%")


@pytest.fixture
async def branch_env(time_skipping_env, postgres_url, mailgun, db) -> AsyncIterator:
    """A worker on the time-skipping server, the front door its emails' links point to, the automation."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    settings = make_settings(postgres_url, mailgun, site_url=base, webhook_signing_key=mailgun.webhook_signing_key)
    pool = await database.connect(settings.database_url, max_size=5)
    door = FrontDoor(pool, settings)

    async def client():
        return time_skipping_env.client

    door.redirects.temporal = client
    await door.start("127.0.0.1", port)
    try:
        async with running_worker(time_skipping_env.client, settings):
            async with db.acquire() as conn:
                automation_id = await create_sequence(conn, f"branch-{uuid.uuid4().hex[:6]}", "Branch", ["free"],
                                                      BRANCHED)
            yield time_skipping_env, settings, automation_id, door
    finally:
        await door.stop()
        await pool.close()


async def branch_reached(db, member_id: str) -> None:
    async def waiting() -> bool:
        return bool(await db.fetchval(
            "SELECT count(*) FROM automation_run_steps s JOIN automation_runs r ON r.id = s.run_id "
            "JOIN automation_actions a ON a.id = s.action_id WHERE r.member_id = $1 AND a.type = 'wait_for_click'",
            member_id))
    await wait_until(waiting)


async def branch_step(db, member_id: str):
    return await db.fetchrow(
        "SELECT s.status, s.path FROM automation_run_steps s JOIN automation_runs r ON r.id = s.run_id "
        "JOIN automation_actions a ON a.id = s.action_id WHERE r.member_id = $1 AND a.type = 'wait_for_click'",
        member_id)


async def click_first_email(mailgun, address: str) -> None:
    """The member follows the first email's tracked link, as their mail client would."""
    message = next(m for m in mailgun.messages if m.subject == "Day 0: read this" and address in m.recipients)
    mine = message.recipient_variables()[address]
    link = _VARIABLE.sub(lambda m: str(mine[m.group(1)]), _TRACKED.search(message.html).group(1))
    async with httpx.AsyncClient() as http:
        answer = await http.get(link, headers={"User-Agent": BROWSER})
    assert answer.status_code == 302 and answer.headers["Location"] == "https://example.com/a"


async def test_a_member_who_clicked_takes_path_a_as_soon_as_they_click(db, mailgun, branch_env):
    env, settings, automation_id, _ = branch_env
    member_id = await add_reader(db, "clicker@example.com")
    handle = await started(db, env, settings, automation_id, member_id)
    await branch_reached(db, member_id)
    await click_first_email(mailgun, "clicker@example.com")

    async def took_path() -> bool:  # the signal ended the wait: no time was skipped for it
        return (await branch_step(db, member_id))["status"] == "finished"
    await wait_until(took_path)
    assert await finished(env, handle) == "completed"
    history = await handle.fetch_history()
    assert not [e for e in history.events if e.event_type == EventType.EVENT_TYPE_TIMER_FIRED]  # not waited out
    assert subjects_to(mailgun, "clicker@example.com") == ["Day 0: read this", "Path A: more like it"]
    assert (await branch_step(db, member_id))["path"] == "clicked"
    [run] = (await automation_runs(automation_id, settings=settings)).runs
    assert [s.path for s in run.steps if s.type == "wait_for_click"] == ["clicked"]


async def test_a_member_who_did_not_click_takes_path_b_when_the_wait_ends(db, mailgun, branch_env):
    env, settings, automation_id, _ = branch_env
    member_id = await add_reader(db, "quiet@example.com")
    before = await env.get_current_time()
    handle = await started(db, env, settings, automation_id, member_id)
    assert await finished(env, handle) == "completed"
    assert (await env.get_current_time() - before).total_seconds() >= WAIT_HOURS * 3600
    assert subjects_to(mailgun, "quiet@example.com") == ["Day 0: read this", "Path B: did you see it?"]
    assert (await branch_step(db, member_id))["path"] == "not_clicked"


async def test_a_click_whose_signal_was_lost_still_takes_path_a_at_the_wait_s_end(db, mailgun, branch_env):
    env, settings, automation_id, door = branch_env
    door.redirects.temporal = None  # the front door cannot reach Temporal: the redirect still answers
    member_id = await add_reader(db, "unsignalled@example.com")
    handle = await started(db, env, settings, automation_id, member_id)
    await branch_reached(db, member_id)
    await click_first_email(mailgun, "unsignalled@example.com")
    assert await finished(env, handle) == "completed"
    assert subjects_to(mailgun, "unsignalled@example.com") == ["Day 0: read this", "Path A: more like it"]


async def test_show_lists_the_branch_with_both_paths(db, postgres_url, branch_env):
    _, settings, automation_id, _ = branch_env
    shown = await show_automation(automation_id, settings=settings)
    branch = next(a for a in shown.actions if a.type == "wait_for_click")
    conditions = sorted(e.condition for e in shown.edges if e.source_action_id == branch.id)
    assert conditions == ["clicked", "not_clicked"] and branch.wait_hours == WAIT_HOURS
    assert [a.subject for a in shown.actions if a.type == "send_email"][1:] == ["Path B: did you see it?",
                                                                                 "Path A: more like it"]
    printed = await run(postgres_url, "show", automation_id)
    assert printed.returncode == 0, printed.stderr
    assert "2. wait up to 48 h for a click on the email before: clicked → 4, otherwise → 3" in printed.stdout
    refused = await run(postgres_url, "edit", automation_id, "--action", "2", "--subject", "No")
    assert_one_line_error(refused, "action 2 is a wait: only --wait-hours changes it")

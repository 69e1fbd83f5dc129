"""`pressroom automations …` on the welcome automations every site has."""

from __future__ import annotations

import asyncio
import json

from tests.foundation.test_cli import assert_one_line_error, pressroom


async def run(postgres_url, *args):
    return await asyncio.to_thread(pressroom, "automations", *args, env={"DATABASE_URL": postgres_url})


async def test_the_welcome_automations_are_listed_switched_edited_and_read(postgres_url, db):
    listed = await run(postgres_url, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {(a["slug"], a["status"], a["actions"]) for a in json.loads(listed.stdout)} == \
        {("welcome-free", "inactive", 0), ("welcome-paid", "inactive", 0)}
    refused = await run(postgres_url, "enable", "welcome-free")
    assert_one_line_error(refused, "automation welcome-free has no email to send: the site's welcome email "
                                   "member-welcome-email-free does not exist yet")

    await db.execute("INSERT INTO automated_emails (name, slug, subject, html, status) VALUES "
                     "('Welcome', 'member-welcome-email-free', 'Welcome!', '<p>Hi</p>', 'inactive')")
    enabled = await run(postgres_url, "enable", "welcome-free")
    assert enabled.returncode == 0 and "automation welcome-free is active" in enabled.stdout
    assert await db.fetchval("SELECT status FROM automated_emails") == "active"  # the welcome's own switch too

    edited = await run(postgres_url, "edit", "welcome-free", "--action", "1", "--subject", "Hello there", "--json")
    assert edited.returncode == 0, edited.stderr
    [action] = json.loads(edited.stdout)["actions"]
    assert action["subject"] == "Hello there" and action["revision"] == 1 and action["type"] == "send_email"
    assert await db.fetchval("SELECT subject FROM automated_emails") == "Hello there"
    wrong = await run(postgres_url, "edit", "welcome-free", "--action", "1", "--wait-hours", "3")
    assert_one_line_error(wrong, "action 1 sends an email: --wait-hours does not apply")
    missing = await run(postgres_url, "show", "nope")
    assert_one_line_error(missing, "no automation 'nope' (see `pressroom automations list`)")

    shown = await run(postgres_url, "show", "welcome-free")
    assert "1. send_email 'Hello there'" in shown.stdout
    runs = await run(postgres_url, "runs", "welcome-free", "--status", "completed", "--json")
    assert json.loads(runs.stdout)["runs"] == []
    bad = await run(postgres_url, "runs", "welcome-free", "--status", "done")
    assert_one_line_error(bad, "--status 'done' is not one of in_progress, completed, exited_early")
    stats = await run(postgres_url, "stats", "welcome-free", "--json")
    assert json.loads(stats.stdout)["sent"] == 0
    disabled = await run(postgres_url, "disable", "welcome-free")
    assert "automation welcome-free is inactive" in disabled.stdout
    assert await db.fetchval("SELECT status FROM automations WHERE slug = 'welcome-free'") == "inactive"

"""Small untruths, made true: the commands that name a member take an address as `members show`
does; `--since`'s error names every form; the development stack is found from a subfolder; adding
an existing address points at `members update`; `pressroom status` says what `check` says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from operations.finding import since_time
from operations.members import add_member, resubscribe_member
from operations.newsletter import preview_email
from pressroom.errors import BadInput
from pressroom.settings import project_home
from tests.foundation.test_cli import pressroom_each
from tests.newsletter.conftest import seed_email

ROOT = Path(__file__).resolve().parents[2]


def test_since_names_every_form_it_takes():
    with pytest.raises(BadInput) as refused:
        since_time("yesterday")
    assert str(refused.value) == ("--since 'yesterday' is not a time: give 30m, 24h, 7d (ago) or an ISO 8601 time "
                                  "(such as 2026-11-01T00:00:00+00:00)")
    with pytest.raises(BadInput, match="needs a UTC offset"):  # an ISO time keeps its own, finer words
        since_time("2026-11-01T00:00:00")


def test_the_development_stack_is_found_from_a_subfolder(tmp_path, monkeypatch):
    home = tmp_path / ".pressroom"
    home.mkdir()
    (home / "stack.json").write_text(json.dumps({"database_url": "postgresql://p@127.0.0.1:54329/postgres",
                                                 "temporal_address": "127.0.0.1:7233",
                                                 "postgres_data": str(home / "postgres"),
                                                 "address_hash_key": "k" * 64}))
    deeper = tmp_path / "docs" / "drafts"
    deeper.mkdir(parents=True)
    monkeypatch.delenv("PRESSROOM_HOME")
    monkeypatch.chdir(deeper)
    assert project_home() == home

    env = {k: v for k, v in os.environ.items() if k not in ("PRESSROOM_HOME", "DATABASE_URL")}
    done = subprocess.run([sys.executable, "-m", "starter", "dev", "env"], cwd=deeper, env={
        **env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "export DATABASE_URL=postgresql://p@127.0.0.1:54329/postgres" in done.stdout
    assert f"export PRESSROOM_ADDRESS_HASH_KEY={'k' * 64}" in done.stdout
    # The stack's own PostgreSQL tools, for a backup (a system pg_dump older than the server refuses it).
    [pg_bin] = [line.split("=", 1)[1] for line in done.stdout.splitlines()
                if line.startswith("export PRESSROOM_DEV_PG_BIN=")]
    assert (Path(pg_bin) / "pg_dump").exists()


async def test_preview_and_resubscribe_take_an_address_as_members_show_does(db, mailgun, settings):
    seeded = await seed_email(db, members=2)
    member = await db.fetchrow("SELECT id, email FROM members ORDER BY email LIMIT 1")
    by_id = await preview_email(seeded.email_id, member_id=member["id"], settings=settings)
    by_address = await preview_email(seeded.email_id, member_id=member["email"].upper(), settings=settings)
    assert by_address == by_id and by_id.reader.startswith(f"member {member['id']}")

    await db.execute("INSERT INTO suppressions (email, reason) VALUES ($1, 'bounce')", member["email"])
    done = await resubscribe_member(member["email"], settings=settings)
    assert (done.member_id, done.suppression) == (member["id"], "bounce")


async def test_adding_an_existing_address_points_at_members_update(db, settings):
    await add_member("ada@example.com", settings=settings)
    with pytest.raises(BadInput, match=r"already exists \(change them with `pressroom members update ID\|ADDRESS`\)"):
        await add_member("ada@example.com", settings=settings)
    # …whose page says when an open rate appears, rather than "none yet (from 5 emails)".
    [show] = pressroom_each(("members", "show", "ada@example.com"), env={"DATABASE_URL": settings.database_url})
    assert show.returncode == 0, show.stderr
    assert "open rate none yet (shown once 5 emails with open tracking were received)" in show.stdout


def test_status_says_what_check_says(postgres_url):
    env = {"DATABASE_URL": postgres_url, "TEMPORAL_ADDRESS": "127.0.0.1:9", "MAILGUN_API_KEY": "key-x",
           "MAILGUN_DOMAIN": "mg.example.com", "MAILGUN_BASE_URL": "http://127.0.0.1:9"}
    check, status = pressroom_each(("check",), ("status",), env=env)
    assert check.returncode == status.returncode == 1
    assert status.stdout == check.stdout and "FAIL Temporal" in status.stdout

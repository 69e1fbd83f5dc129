"""`members delete`: the member's row and personal data gone; records of sends keep the member id,
never the address; a suppression keeps a keyed hash of it, which finds the address again if it is
added back. Proved by scanning every text and JSON column of every table for the address."""

from __future__ import annotations

import json
import os

import pytest

from operations.members import add_member, delete_member
from pressroom.errors import NotFound, PressroomError
from pressroom.settings import load_settings
from tests.operations.test_waiting import cli

ADDRESS = "Grace.Hopper+news@Example.com"
NAME = "Grace Brewster Hopper"


async def found_in_clear(db, *needles: str) -> list[str]:
    """Every table.column whose text holds one of `needles` (case-insensitive)."""
    columns = await db.fetch(
        "SELECT table_name, column_name FROM information_schema.columns c WHERE table_schema = 'public' "
        "AND data_type IN ('text', 'character varying', 'character', 'json', 'jsonb', 'ARRAY') "
        "AND EXISTS (SELECT 1 FROM information_schema.tables t WHERE t.table_schema = 'public' "
        "AND t.table_name = c.table_name AND t.table_type = 'BASE TABLE')")
    hits = []
    for column in columns:
        for needle in needles:
            n = await db.fetchval(f'SELECT count(*) FROM "{column["table_name"]}" '
                                  f'WHERE strpos(lower("{column["column_name"]}"::text), lower($1)) > 0', needle)
            if n:
                hits.append(f"{column['table_name']}.{column['column_name']}")
    return hits


async def member_everywhere(db, settings) -> str:
    """A member with a trace in every table that outlives them: a sent email (recipient, failure,
    complaint), a batch not sent yet, a suppression, a welcome email sent, an outbox entry with an
    error naming them, a rejected provider event and a pushed one waiting."""
    member_id = (await add_member(ADDRESS, NAME, settings=settings)).member_id
    newsletter = await db.fetchval("INSERT INTO newsletters (name, slug) VALUES ('Weekly', 'weekly') RETURNING id")
    await db.execute("INSERT INTO members_newsletters (member_id, newsletter_id) VALUES ($1, $2) "
                     "ON CONFLICT DO NOTHING", member_id, newsletter)
    for n, (batch_status, outcome) in enumerate([("submitted", "accepted"), ("pending", None)]):
        post = await db.fetchval("INSERT INTO posts (title, slug, status, published_at) "
                                 "VALUES ('P', $1, 'published', now()) RETURNING id", f"p{n}")
        email = await db.fetchval("INSERT INTO emails (post_id, subject) VALUES ($1, 'S') RETURNING id", post)
        batch = await db.fetchval("INSERT INTO email_batches (email_id, status, provider_id, send_outcome) "
                                  "VALUES ($1, $2, $3, $4) RETURNING id", email, batch_status,
                                  "<m@mg>" if outcome else None, outcome)
        recipient = await db.fetchval(
            "INSERT INTO email_recipients (email_id, member_id, batch_id, member_uuid, member_email, member_name) "
            "SELECT $1, id, $2, uuid, email, name FROM members WHERE id = $3 RETURNING id", email, batch, member_id)
        if outcome:
            await db.execute(
                "INSERT INTO email_recipient_failures (email_id, member_id, email_recipient_id, code, message, "
                "severity, failed_at, event_id) VALUES ($1, $2, $3, 550, $4, 'permanent', now(), 'ev1')",
                email, member_id, recipient, f"550 5.1.1 <{ADDRESS.lower()}>: mailbox unavailable")
            await db.execute("INSERT INTO email_spam_complaint_events (member_id, email_id, email_address) "
                             "VALUES ($1, $2, $3)", member_id, email, ADDRESS)
            await db.execute("INSERT INTO suppressions (email, email_id, reason) VALUES ($1, $2, 'spam')",
                             ADDRESS, email)
    welcome = await db.fetchval("INSERT INTO automated_emails (name, slug, subject, html) "
                                "VALUES ('W', 'member-welcome-email-free', 'Hi', '<p>Hi</p>') RETURNING id")
    await db.execute("INSERT INTO automated_email_recipients (automated_email_id, member_id, member_uuid, "
                     "member_email, member_name, provider_id, send_outcome) "
                     "SELECT $1, id, uuid, email, name, '<w@mg>', 'accepted' "
                     "FROM members WHERE id = $2", welcome, member_id)
    await db.execute("UPDATE outbox SET last_error_msg = $2 WHERE payload->>'member_id' = $1", member_id,
                     f"refused: {ADDRESS.upper()} is on a list")
    event = json.dumps({"id": "e1", "event": "failed", "recipient": ADDRESS})
    await db.execute("INSERT INTO delivery_events_rejected (provider, source, event_id, reason, event, digest) "
                     "VALUES ('mailgun', 'poll', 'e1', 'bad', $1, 'd1')", event)
    await db.execute("INSERT INTO webhook_inbox (provider, kind, event) VALUES ('mailgun', 'failed', $1)", event)
    assert "members.email" in await found_in_clear(db, ADDRESS)
    return member_id


async def test_deleted_member_is_found_nowhere_in_clear_and_stays_suppressed(postgres_url, mailgun, db):
    settings = load_settings(database_url=postgres_url, address_hash_key="a-key-of-the-site-0123456789")
    member_id = await member_everywhere(db, settings)

    done = await delete_member(ADDRESS.lower(), settings=settings)
    assert (done.member_id, done.suppression) == (member_id, "kept as a keyed hash")
    assert (done.recipients_cleared, done.recipients_removed) == (1, 1)
    assert await found_in_clear(db, ADDRESS, NAME) == []
    # Statistics keep the member's id; the failure and complaint stand, with the address replaced.
    assert await db.fetchval("SELECT count(*) FROM email_recipients WHERE member_id = $1", member_id) == 1
    assert await db.fetchval("SELECT message FROM email_recipient_failures") == \
        "550 5.1.1 <<address>>: mailbox unavailable"
    assert await db.fetchval("SELECT count(*) FROM members_newsletters") == 0
    with pytest.raises(NotFound, match=f"member {member_id} does not exist"):
        await delete_member(member_id, settings=settings)

    # The same address added again is still suppressed: its complaint stands.
    again = await add_member(ADDRESS, settings=settings)
    assert await db.fetchval("SELECT reason FROM suppressions s JOIN members m ON m.email = s.email") == "spam"
    await delete_member(again.member_id, settings=settings)
    assert await found_in_clear(db, ADDRESS) == []


async def test_without_a_hash_key_nothing_is_deleted_and_the_command_names_the_variable(settings, db):
    member_id = await member_everywhere(db, settings)
    env = {**os.environ, "DATABASE_URL": settings.database_url}
    env.pop("PRESSROOM_ADDRESS_HASH_KEY", None)
    code, out, err = await cli("members", "delete", member_id, "--yes", "--json", env=env)
    assert code == 1 and out == ""
    assert err.startswith("error: PRESSROOM_ADDRESS_HASH_KEY is not set: a deleted member's suppression would go")
    assert await db.fetchval("SELECT count(*) FROM members WHERE id = $1", member_id) == 1
    assert await db.fetchval("SELECT email FROM suppressions") == ADDRESS


async def test_the_dev_stack_keeps_a_hash_key_so_a_bounced_address_added_back_stays_suppressed(postgres_url, db,
                                                                                              tmp_path):
    """A hard-bounced member deleted and added again, through the commands, with only what the
    development stack records: still suppressed, no welcome email queued."""
    from devstack.stack import kept_secrets

    home = tmp_path / ".pressroom"
    home.mkdir()
    (home / "stack.json").write_text(json.dumps({"database_url": postgres_url, **kept_secrets(home)}))
    env = {**os.environ, "PRESSROOM_HOME": str(home)}
    for variable in ("DATABASE_URL", "PRESSROOM_ADDRESS_HASH_KEY"):
        env.pop(variable, None)
    await db.execute("INSERT INTO automated_emails (name, slug, subject, html, status) VALUES "
                     "('W', 'member-welcome-email-free', 'Hi', '<p>Hi</p>', 'active')")
    code, out, err = await cli("members", "add", ADDRESS, "--welcome", env=env)
    assert code == 0, err
    member_id = await db.fetchval("SELECT id FROM members")
    assert await db.fetchval("SELECT count(*) FROM outbox") == 1  # a new member is welcomed
    await db.execute("INSERT INTO suppressions (email, reason) VALUES ($1, 'bounce')", ADDRESS)

    code, out, err = await cli("members", "delete", member_id, "--yes", "--json", env=env)
    assert code == 0, err
    assert json.loads(out)["suppression"] == "kept as a keyed hash"
    assert await found_in_clear(db, ADDRESS) == []

    code, out, err = await cli("members", "add", ADDRESS, "--welcome", env=env)
    assert code == 0, err
    assert "welcome email queued" not in out
    code, out, err = await cli("members", "show", ADDRESS, "--json", env=env)
    assert code == 0, err
    assert json.loads(out)["suppression"]["reason"] == "bounce"
    again = await db.fetchval("SELECT id FROM members")
    # Their event is written, but asks no welcome: a suppressed address is never welcomed.
    assert await db.fetchval("SELECT array_agg(payload->>'welcome') FROM outbox WHERE payload->>'member_id' = $1",
                             again) == ["false"]

    # The key is the stack's for good: the same after another start, and after `dev down` (which
    # forgets stack.json but not the kept secrets).
    assert kept_secrets(home) == kept_secrets(home, {"address_hash_key": "an older stack's"})
    assert len(kept_secrets(home)["address_hash_key"]) == 64


async def test_a_member_in_a_send_being_looked_up_is_not_deleted(settings, db):
    member_id = await member_everywhere(db, settings)
    await db.execute("UPDATE email_batches SET status = 'submitting', send_outcome = 'uncertain' "
                     "WHERE status = 'pending'")
    with pytest.raises(PressroomError, match=r"was not deleted: a batch of email .* may have reached the provider"):
        await delete_member(member_id, settings=settings)
    assert await db.fetchval("SELECT count(*) FROM members WHERE id = $1", member_id) == 1
    assert "email_recipient_failures.message" in await found_in_clear(db, ADDRESS)

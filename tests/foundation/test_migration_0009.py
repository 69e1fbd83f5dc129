"""Migration 0009 on a database that 0.1.0 filled: stored rows keep their meaning."""

from __future__ import annotations

import asyncpg
import pytest

from pressroom import database

BEFORE = "0009"


async def migrated_up_to_0_1_0(url: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(url)
    await conn.execute("CREATE TABLE schema_migrations (version text PRIMARY KEY, "
                       "applied_at timestamptz NOT NULL DEFAULT now())")
    for version, sql in database.migrations():
        if version < BEFORE:
            await conn.execute(sql)
            await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)
    return conn


async def test_failure_records_become_one_per_recipient_by_the_overwrite_rules(empty_database):
    conn = await migrated_up_to_0_1_0(empty_database)
    await conn.execute("""
        INSERT INTO posts (id, title, slug) VALUES ('p1', 'P', 'p');
        INSERT INTO emails (id, post_id, subject) VALUES ('e1', 'p1', 'S');
        INSERT INTO email_batches (id, email_id) VALUES ('b1', 'e1');
        INSERT INTO email_recipients (id, email_id, member_id, batch_id, member_uuid, member_email)
        SELECT 'r' || n, 'e1', 'm' || n, 'b1', gen_random_uuid(), 'm' || n || '@example.com'
        FROM generate_series(1, 3) n;
        -- r1: temporary, then permanent, then a later permanent and temporary: the first permanent stands.
        -- r2: three temporary ones: the latest stands. r3: one failure, kept as it is.
        INSERT INTO email_recipient_failures (email_id, email_recipient_id, code, message, severity, failed_at,
                                              event_id) VALUES
            ('e1', 'r1', 452, 'quota', 'temporary', '2026-01-01 10:00Z', 'ev1'),
            ('e1', 'r1', 550, 'no mailbox', 'permanent', '2026-01-01 11:00Z', 'ev2'),
            ('e1', 'r1', 551, 'gone', 'permanent', '2026-01-01 12:00Z', 'ev3'),
            ('e1', 'r1', 452, 'quota', 'temporary', '2026-01-01 13:00Z', 'ev4'),
            ('e1', 'r2', 452, 'a', 'temporary', '2026-01-01 10:00Z', 'ev5'),
            ('e1', 'r2', 452, 'c', 'temporary', '2026-01-01 12:00Z', 'ev6'),
            ('e1', 'r2', 452, 'b', 'temporary', '2026-01-01 11:00Z', 'ev7'),
            ('e1', 'r3', 550, 'x', 'permanent', '2026-01-01 10:00Z', 'ev8');
    """)
    assert "0009_reference_parity" in await database.migrate(empty_database)
    kept = await conn.fetch("SELECT email_recipient_id, event_id FROM email_recipient_failures ORDER BY 1")
    assert [tuple(row) for row in kept] == [("r1", "ev2"), ("r2", "ev6"), ("r3", "ev8")]
    with pytest.raises(asyncpg.UniqueViolationError):  # a second row for one recipient
        await conn.execute("INSERT INTO email_recipient_failures (email_id, email_recipient_id, code, message, "
                           "severity, failed_at, event_id) VALUES ('e1', 'r3', 1, 'm', 'temporary', now(), 'ev9')")
    await conn.close()


async def test_outbox_dispatched_becomes_the_protocols_sending_even_when_written_by_0_1_0(empty_database):
    conn = await migrated_up_to_0_1_0(empty_database)
    await conn.execute("INSERT INTO outbox (id, event_type, payload, idempotency_key, payload_digest, status) "
                       "VALUES ('o1', 'NoopEvent', '{}', 'k1', 'd', 'dispatched'), "
                       "('o2', 'NoopEvent', '{}', 'k2', 'd', 'pending')")
    await database.migrate(empty_database)
    assert await conn.fetchval("SELECT status FROM outbox WHERE id = 'o1'") == "sending"
    # A 0.1.0 relay still running during the deploy claims o2 with its own word for it.
    await conn.execute("UPDATE outbox SET status = 'dispatched', dispatched_at = now() WHERE id = 'o2'")
    assert await conn.fetchval("SELECT status FROM outbox WHERE id = 'o2'") == "sending"
    assert await conn.fetchval("SELECT count(*) FROM outbox WHERE status = 'dispatched'") == 0
    await conn.close()

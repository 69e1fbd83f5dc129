"""Migrations: applied once, under an advisory lock, safe from several processes at once."""

import asyncio

import asyncpg
import pytest

from pressroom import database


async def test_migrate_twice_applies_once(empty_database):
    first = await database.migrate(empty_database)
    assert first == [version for version, _ in database.migrations()]
    assert await database.migrate(empty_database) == []


async def test_concurrent_migrations_apply_each_file_once(empty_database):
    results = await asyncio.gather(*(database.migrate(empty_database) for _ in range(4)))
    applied = [version for result in results for version in result]
    assert sorted(applied) == sorted(version for version, _ in database.migrations())
    conn = await asyncpg.connect(empty_database)
    assert await conn.fetchval("SELECT count(*) FROM schema_migrations") == len(database.migrations())
    await conn.close()


async def test_the_schema_makes_bad_states_impossible(db):
    await db.execute("INSERT INTO members (id, email) VALUES ('m1', 'a@example.com')")
    with pytest.raises(asyncpg.CheckViolationError):
        await db.execute("UPDATE members SET status = 'vip' WHERE id = 'm1'")
    await db.execute("INSERT INTO posts (id, title, slug) VALUES ('p1', 'Hello', 'hello')")
    with pytest.raises(asyncpg.CheckViolationError):  # scheduled without a time
        await db.execute("UPDATE posts SET status = 'scheduled' WHERE id = 'p1'")
    await db.execute("INSERT INTO emails (id, post_id, subject) VALUES ('e1', 'p1', 'Hello')")
    await db.execute("INSERT INTO email_batches (id, email_id) VALUES ('b1', 'e1')")
    insert_recipient = ("INSERT INTO email_recipients (email_id, member_id, batch_id, member_uuid, member_email)"
                        " VALUES ('e1', 'm1', 'b1', gen_random_uuid(), 'a@example.com')")
    await db.execute(insert_recipient)
    with pytest.raises(asyncpg.UniqueViolationError):  # one recipient row per member and email
        await db.execute(insert_recipient)
    with pytest.raises(asyncpg.CheckViolationError):  # submitted needs the provider's id
        await db.execute("UPDATE email_batches SET status = 'submitted' WHERE id = 'b1'")
    with pytest.raises(asyncpg.CheckViolationError):  # error text is capped at 2,000 characters
        await db.execute("INSERT INTO outbox (event_type, payload, idempotency_key, payload_digest, last_error_msg)"
                         " VALUES ('X', '{}', 'k', 'd', repeat('x', 2001))")


async def test_an_unreachable_database_is_one_line_without_the_password():
    with pytest.raises(database.DatabaseUnavailable) as raised:
        await database.connect("postgresql://user:s3cret@127.0.0.1:1/db")
    message = str(raised.value)
    assert "127.0.0.1:1" in message and "s3cret" not in message and "\n" not in message

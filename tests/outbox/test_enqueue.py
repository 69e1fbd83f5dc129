"""Enqueueing, the store's two ways: entries from payloads (`enqueue_many`) and entries the database
makes from new ids (`enqueue_for_new_ids`, an import's welcome emails) are the same rows."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from pressroom.store.outbox import NOTIFY_CHANNEL, enqueue_for_new_ids, enqueue_many, payload_digest

# Ids whose JSON needs escaping: the database's JSON of them must be Python's, byte for byte.
IDS = ["6f1c0f8e-2b1a-4c3e-9d1f-0a2b3c4d5e6f", 'quote"d', "back\\slash", "tab\there", "line\nbreak", "x\u001fy"]
ROW = ("SELECT event_type, payload::text AS payload, idempotency_key, payload_digest, status, webhook_id "
       "FROM outbox WHERE idempotency_key LIKE $1 || '%' ORDER BY payload->>'member_id'")


async def test_entries_made_from_new_ids_are_the_entries_made_from_payloads(db):
    async with db.acquire() as conn, conn.transaction():
        written = await enqueue_for_new_ids(conn, "MemberCreatedEvent", "member_id", "made-", IDS)
        await enqueue_many(conn, "MemberCreatedEvent", [({"member_id": id_}, f"given-{id_}") for id_ in IDS])
    assert written == len(IDS)
    made, given = await db.fetch(ROW, "made-"), await db.fetch(ROW, "given-")
    assert [{**r, "idempotency_key": r["idempotency_key"].removeprefix("made-")} for r in map(dict, made)] == \
        [{**r, "idempotency_key": r["idempotency_key"].removeprefix("given-")} for r in map(dict, given)]
    assert [r["payload_digest"] for r in made] == [payload_digest({"member_id": r["idempotency_key"][5:]})
                                                   for r in made]
    assert {r["status"] for r in made} == {"pending"} and {r["webhook_id"] for r in made} == {None}


async def test_an_id_that_is_not_ascii_is_refused_before_anything_is_written(db):
    async with db.acquire() as conn, conn.transaction():
        with pytest.raises(ValueError, match="must be ASCII"):
            await enqueue_for_new_ids(conn, "MemberCreatedEvent", "member_id", "made-", ["plain", "café"])
    assert await db.fetchval("SELECT count(*) FROM outbox") == 0


async def test_a_key_already_there_fails_the_transaction_instead_of_a_second_entry(db):
    async with db.acquire() as conn, conn.transaction():
        await enqueue_many(conn, "MemberCreatedEvent", [({"member_id": "m1"}, "made-m1")])
    with pytest.raises(asyncpg.UniqueViolationError):
        async with db.acquire() as conn, conn.transaction():
            await enqueue_for_new_ids(conn, "MemberCreatedEvent", "member_id", "made-", ["m2", "m1"])
    assert [r["idempotency_key"] for r in await db.fetch("SELECT idempotency_key FROM outbox")] == ["made-m1"]


async def test_entries_need_the_transaction_of_their_change(db):
    async with db.acquire() as conn:
        with pytest.raises(RuntimeError, match="open transaction"):
            await enqueue_for_new_ids(conn, "MemberCreatedEvent", "member_id", "made-", ["m1"])
    assert await db.fetchval("SELECT count(*) FROM outbox") == 0


async def test_the_relay_is_told_when_the_entries_commit(db):
    told = asyncio.Event()

    def tell(*_) -> None:
        told.set()

    async with db.acquire() as listener:
        await listener.add_listener(NOTIFY_CHANNEL, tell)
        try:
            async with db.acquire() as conn, conn.transaction():
                await enqueue_for_new_ids(conn, "MemberCreatedEvent", "member_id", "made-", ["m1"])
            await asyncio.wait_for(told.wait(), timeout=30)
        finally:
            await listener.remove_listener(NOTIFY_CHANNEL, tell)

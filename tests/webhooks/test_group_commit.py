"""The receiver's group commit: many requests at once, each answered 200 only once its event is
committed, each token stored once, and an event PostgreSQL refuses failing alone. Real HTTP, real
PostgreSQL."""

from __future__ import annotations

import asyncio

import asyncpg

from frontdoor.group_commit import GroupCommit, Pushed

from .conftest import delivered, post, signed


async def test_requests_at_once_are_stored_once_each_and_answered_after_their_commit(db, receiver, mailgun):
    key = mailgun.webhook_signing_key
    bodies = [signed(delivered(n), key) for n in range(120)]
    bodies += bodies[:20]  # the same requests again, among the others: replays

    async def post_and_look(body) -> tuple[int, bool]:
        status = await post(receiver.url, body)
        token = body["signature"]["token"]
        committed = await db.fetchval("SELECT EXISTS (SELECT 1 FROM webhook_tokens WHERE token = $1)", token)
        return status, committed

    answers = await asyncio.gather(*(post_and_look(body) for body in bodies))
    assert sorted(status for status, _ in answers).count(200) == 120
    assert [status for status, _ in answers].count(406) == 20
    assert all(committed for status, committed in answers if status == 200)  # seen by another connection
    assert await db.fetchval("SELECT count(*) FROM webhook_inbox") == 120
    assert await db.fetchval("SELECT count(DISTINCT event::jsonb -> 'id') FROM webhook_inbox") == 120


async def test_a_token_twice_in_one_group_is_stored_once_and_a_refused_event_fails_alone(db):
    group = GroupCommit(db, "mailgun")
    first = [Pushed(f"token-{n}", 4e9, "delivered", f'{{"n": {n}}}') for n in range(30)]
    results = await asyncio.gather(*(group.store(p) for p in [*first, Pushed("token-3", 4e9, "delivered", "{}")]))
    assert results == [True] * 30 + [False]  # one group: the first of a token stored, the other a replay
    assert await db.fetchval("SELECT count(*) FROM webhook_inbox") == 30

    more = [Pushed(f"token-{n}", 4e9, "delivered", f'{{"n": {n}}}') for n in range(30, 60)]
    refused = Pushed("token-nul", 4e9, "delivered", '{"n": "\x00"}')  # text cannot hold NUL
    results = await asyncio.gather(*(group.store(p) for p in [*more[:10], refused, *more[10:]]),
                                   return_exceptions=True)
    assert isinstance(results[10], asyncpg.DataError)
    assert results[:10] + results[11:] == [True] * 30
    assert await db.fetchval("SELECT count(*) FROM webhook_inbox") == 60
    assert await db.fetchval("SELECT count(*) FROM webhook_tokens") == 60
    assert group.committing == 0 and not group.waiting

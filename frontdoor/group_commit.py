"""The webhook receiver's group commit: the events of the requests that arrive while a commit is in
flight are stored together in the next one, one statement and one commit for all of them.

Nothing is answered earlier than before: each request still waits until the commit that holds its
event (and its token) has returned, and only then is answered 200. A token seen twice in one group
is stored once, the later requests being replays, as if they had come one after the other. An
event PostgreSQL refuses does not take its group down: the group is then stored event by event.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, NamedTuple

import asyncpg

from pressroom.store.events import INBOX_CHANNEL

if TYPE_CHECKING:
    from collections.abc import Sequence

GROUP_LIMIT = 500  # events in one commit: its statement's arrays stay small
COMMITS_IN_FLIGHT = 4  # each on a connection of the pool; the next group gathers meanwhile

# One statement, atomic: the tokens not seen before are remembered and their events stored, in the
# order the requests came; a replayed token stores nothing. The NOTIFY is delivered at commit.
_STORE_GROUP = f"""
WITH item AS (
    SELECT * FROM unnest($2::text[], $3::float8[], $4::text[], $5::text[]) WITH ORDINALITY
           AS t(token, expires, kind, event, n)
), token AS (
    INSERT INTO webhook_tokens (provider, token, expires_at) SELECT $1, token, to_timestamp(expires) FROM item
    ON CONFLICT DO NOTHING RETURNING token
), stored AS (
    INSERT INTO webhook_inbox (provider, kind, event)
    SELECT $1, item.kind, item.event FROM item JOIN token USING (token) ORDER BY item.n RETURNING id
)
SELECT array(SELECT token FROM token) AS tokens, (SELECT count(*) FROM stored) AS stored,
       pg_notify('{INBOX_CHANNEL}', '')"""

# What PostgreSQL answers for a value it cannot take, and a value asyncpg cannot encode: an event at
# fault, not the database (anything else fails the whole group, and each request is answered 503).
_EVENT_AT_FAULT = (asyncpg.DataError, asyncpg.IntegrityConstraintViolationError, UnicodeEncodeError)


class Pushed(NamedTuple):
    token: str
    expires: float  # epoch seconds after which the token could not be accepted anyway
    kind: str
    event: str  # the event's JSON text


class GroupCommit:
    """`await store(pushed)`: True once the event is committed, False for a replayed token."""

    def __init__(self, pool: asyncpg.Pool, provider: str) -> None:
        self.pool, self.provider = pool, provider
        self.waiting: list[tuple[Pushed, asyncio.Future]] = []
        # Committers run while something waits; counted as they leave their loop (not when their
        # task is reaped), so that a request arriving then starts another.
        self.committing = 0
        self.tasks: set[asyncio.Task] = set()

    async def store(self, pushed: Pushed) -> bool:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((pushed, future))
        if self.committing < COMMITS_IN_FLIGHT:
            self.committing += 1
            task = asyncio.create_task(self._commit_waiting())
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return await future

    async def _commit_waiting(self) -> None:
        try:
            while self.waiting:
                group, self.waiting = self.waiting[:GROUP_LIMIT], self.waiting[GROUP_LIMIT:]
                await self._commit(group)
        finally:
            self.committing -= 1

    async def _commit(self, group: Sequence[tuple[Pushed, asyncio.Future]]) -> None:
        try:
            try:
                stored = await self._store(pushed for pushed, _ in group)
            except _EVENT_AT_FAULT:
                if len(group) == 1:
                    raise
                for one in group:
                    await self._commit([one])
                return
        except BaseException as error:  # cancelled too: no request is left waiting
            for _, future in group:
                if not future.done():
                    future.set_exception(error if isinstance(error, Exception) else ConnectionError("shutting down"))
            if not isinstance(error, Exception):
                raise
            return
        for (_, future), was_stored in zip(group, stored, strict=True):
            if not future.done():
                future.set_result(was_stored)

    async def _store(self, group) -> list[bool]:
        """Whether each event was stored: its token new, and its first time in the group."""
        group = list(group)
        first: dict[str, int] = {}
        for n, pushed in enumerate(group):
            first.setdefault(pushed.token, n)
        unique = [group[n] for n in first.values()]
        tokens = set((await self.pool.fetchrow(
            _STORE_GROUP, self.provider, [p.token for p in unique], [p.expires for p in unique],
            [p.kind for p in unique], [p.event for p in unique]))["tokens"])
        return [first[pushed.token] == n and pushed.token in tokens for n, pushed in enumerate(group)]

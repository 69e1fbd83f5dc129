"""Acceptances Pressroom received pushed, kept to confirm an uncertain send where the provider has
nothing to ask (SES: no events API). The receiver keeps every accepted-kind event carrying our
marks (frontdoor/receiver.py, asking the push's `acceptance_marks`); a provider that `confirms_by`
received events answers `find_accepted` here.

Kept in `provider_acceptances` (schema/0028): the recipient, our marks, the provider's id of the
copy. A row is kept once (recipient, provider id); SNS's retries and duplicates add nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import asyncpg


class ReceivedEvents(Protocol):
    """Acceptances kept from pushed events (the receiver writes them with the push's token)."""

    async def find(self, provider: str, *, recipient: str, mark: Mapping[str, str], begin: datetime,
                   end: datetime) -> str | None:
        """The provider's id of a kept acceptance of `recipient` carrying every item of `mark`,
        accepted in [begin, end]."""

    async def find_each(self, provider: str, *, recipients: Sequence[str], mark: Mapping[str, str],
                        begin: datetime, end: datetime) -> dict[str, str]:
        """`find` for each of `recipients` at once: recipient (as given) → the provider's id; a
        recipient with no kept acceptance is left out."""


_FIND = """
SELECT provider_message_id FROM provider_acceptances
WHERE provider = $1 AND recipient = lower($2) AND marks @> $3::jsonb AND accepted_at BETWEEN $4 AND $5
ORDER BY accepted_at LIMIT 1"""

_FIND_EACH = """
SELECT DISTINCT ON (recipient) recipient, provider_message_id FROM provider_acceptances
WHERE provider = $1 AND recipient = ANY($2::text[]) AND marks @> $3::jsonb AND accepted_at BETWEEN $4 AND $5
ORDER BY recipient, accepted_at"""


# The push's identity and the acceptance in one statement: a second copy (SNS's retry) keeps nothing.
_KEEP_PUSHED = """
WITH token AS (
    INSERT INTO webhook_tokens (provider, token, expires_at) VALUES ($1, $2, to_timestamp($3))
    ON CONFLICT DO NOTHING RETURNING token
), kept AS (
    INSERT INTO provider_acceptances (provider, recipient, marks, provider_message_id, accepted_at)
    SELECT $1, lower($4), $5::jsonb, $6, to_timestamp($7) FROM token ON CONFLICT DO NOTHING RETURNING 1
)
SELECT count(*) FROM token"""


class StoredAcceptances:
    """`ReceivedEvents` in PostgreSQL, shared by every receiver and worker."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def keep_pushed(self, provider: str, identity: str, keep_until: float, recipient: str,
                          marks: Mapping[str, str], provider_message_id: str, accepted_at: float) -> bool:
        """Keep a pushed acceptance with its push's identity; False when that identity was seen before."""
        return bool(await self.pool.fetchval(_KEEP_PUSHED, provider, identity, keep_until, recipient,
                                             json.dumps(dict(marks)), provider_message_id, accepted_at))

    async def find(self, provider: str, *, recipient: str, mark: Mapping[str, str], begin: datetime,
                   end: datetime) -> str | None:
        return await self.pool.fetchval(_FIND, provider, recipient, json.dumps(dict(mark)), begin, end)

    async def find_each(self, provider: str, *, recipients: Sequence[str], mark: Mapping[str, str],
                        begin: datetime, end: datetime) -> dict[str, str]:
        given = {address.lower(): address for address in recipients}
        rows = await self.pool.fetch(_FIND_EACH, provider, list(given), json.dumps(dict(mark)), begin, end)
        return {given[row["recipient"]]: row["provider_message_id"] for row in rows if row["recipient"] in given}


class MemoryAcceptances:
    """`ReceivedEvents` in memory, for the port's contract test."""

    def __init__(self) -> None:
        self.kept: dict[tuple[str, str, str], tuple[dict[str, str], datetime]] = {}

    async def keep(self, provider: str, recipient: str, marks: Mapping[str, str], provider_message_id: str,
                   accepted_at: datetime) -> None:
        self.kept.setdefault((provider, recipient.casefold(), provider_message_id), (dict(marks), accepted_at))

    async def find(self, provider: str, *, recipient: str, mark: Mapping[str, str], begin: datetime,
                   end: datetime) -> str | None:
        found = sorted((at, message_id) for (name, address, message_id), (marks, at) in self.kept.items()
                       if name == provider and address == recipient.casefold() and begin <= at <= end
                       and all(marks.get(k) == v for k, v in mark.items()))
        return found[0][1] if found else None

    async def find_each(self, provider: str, *, recipients: Sequence[str], mark: Mapping[str, str],
                        begin: datetime, end: datetime) -> dict[str, str]:
        found = {address: await self.find(provider, recipient=address, mark=mark, begin=begin, end=end)
                 for address in recipients}
        return {address: message_id for address, message_id in found.items() if message_id is not None}

"""Enqueue: an outbox entry written in the caller's open transaction, with the change that caused it."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import asyncpg

from pressroom import tracing

NOTIFY_CHANNEL = "pressroom_outbox"


def canonical_json(payload: dict[str, Any]) -> str:
    """The payload as its digest reads it (keys sorted, no spaces); stored as it is, jsonb keeps the same value."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"))


def payload_digest(payload: dict[str, Any]) -> str:
    return _digest(canonical_json(payload))


def _digest(canonical: str) -> str:
    return hashlib.sha256(canonical.encode()).hexdigest()


# One statement for one entry or many: the entries share the event type and the enqueuer's trace.
# An entry for a site webhook (its payload names one) takes its place in that webhook's order.
_INSERT = """
INSERT INTO outbox (event_type, payload, idempotency_key, payload_digest, trace_context, webhook_id, webhook_seq)
SELECT $1, e.payload, e.key, e.digest, $6::jsonb, e.webhook_id,
       CASE WHEN e.webhook_id IS NOT NULL THEN nextval('outbox_webhook_seq') END
FROM unnest($2::jsonb[], $3::text[], $4::text[], $5::text[])
     WITH ORDINALITY AS e(payload, key, digest, webhook_id, place)
ORDER BY e.place
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING idempotency_key"""

# Entries whose payload is one id, {field: id, …same fields}, built by the database from the ids: the payload's
# canonical JSON once, stored as the payload and hashed as its digest (payload_digest's, for ids of
# ASCII characters). Each id is new, and so its key: no ON CONFLICT, whose speculative insertion
# cost a third more than the insert itself; a key that was there after all fails the transaction.
_INSERT_NEW_IDS = """
INSERT INTO outbox (event_type, payload, idempotency_key, payload_digest, trace_context)
SELECT $1, e.canonical::jsonb, $2::text || e.id, encode(sha256(convert_to(e.canonical, 'UTF8')), 'hex'), $5::jsonb
FROM (SELECT u.id, '{' || to_json($3::text)::text || ':' || to_json(u.id)::text || $6::text || '}' AS canonical
      FROM unnest($4::text[]) AS u(id)) e"""


async def enqueue(conn: asyncpg.Connection, event_type: str, payload: dict[str, Any],
                  idempotency_key: str | None = None) -> str:
    """Write an outbox entry in the caller's open transaction; returns its idempotency key.

    The entry commits or vanishes with the change that caused it. Without a key, the key is derived
    from the event type and payload, so the same event enqueued twice is delivered once. The NOTIFY
    reaches the relay only when the transaction commits.
    """
    digest = payload_digest(payload)
    key = idempotency_key or f"{event_type}-{digest[:32]}"
    await enqueue_many(conn, event_type, [(payload, key)])
    return key


async def enqueue_many(conn: asyncpg.Connection, event_type: str,
                       entries: list[tuple[dict[str, Any], str]]) -> int:
    """`enqueue` for many entries of one event type, each (payload, idempotency key), in one
    statement; returns how many were new (a key already in the outbox is left as it is)."""
    _check_transaction(conn)
    if not entries:
        return 0
    payloads = [canonical_json(payload) for payload, _ in entries]  # each payload serialised once
    written = await conn.fetch(
        _INSERT, event_type, payloads, [key for _, key in entries], [_digest(text) for text in payloads],
        [payload.get("webhook_id") for payload, _ in entries], _trace_context())
    await _notify(conn)
    return len(written)


async def enqueue_for_new_ids(conn: asyncpg.Connection, event_type: str, field: str, key_prefix: str,
                              ids: list[str], same: dict[str, Any] | None = None) -> int:
    """`enqueue_many` of one entry per id, payload {field: id, **same} and key `key_prefix + id`, where
    no entry can have that key yet (the id was made in this transaction: a member just added); the
    entries are made by the database, set-based. Returns how many were written (all of them)."""
    _check_transaction(conn)
    if not ids:
        return 0
    if not all(id_.isascii() for id_ in ids):  # the database's JSON keeps other characters as they are
        raise ValueError("an id of an outbox entry made by the database must be ASCII, for its digest")
    if same and min(same) <= field:  # appended after the id, they must sort after it, as canonical JSON does
        raise ValueError(f"the payload's other fields must sort after {field!r}")
    rest = "," + canonical_json(same)[1:-1] if same else ""
    written = await conn.execute(_INSERT_NEW_IDS, event_type, key_prefix, field, ids, _trace_context(), rest)
    await _notify(conn)
    return int(written.split()[-1])


def _check_transaction(conn: asyncpg.Connection) -> None:
    if not conn.is_in_transaction():
        raise RuntimeError("enqueue needs an open transaction: the entry must commit with its change")


def _trace_context() -> str | None:
    carrier = tracing.current_context_carrier()  # the delivery continues the enqueuer's trace
    return json.dumps(carrier) if carrier else None


async def _notify(conn: asyncpg.Connection) -> None:
    await conn.execute("SELECT pg_notify($1, '')", NOTIFY_CHANNEL)

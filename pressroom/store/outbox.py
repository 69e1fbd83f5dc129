"""Enqueue: an outbox entry written in the caller's open transaction, with the change that caused it."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import asyncpg

from pressroom import tracing

NOTIFY_CHANNEL = "pressroom_outbox"


def payload_digest(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# One statement for one entry or many: the entries share the event type and the enqueuer's trace.
# An entry for a site webhook (its payload names one) takes its place in that webhook's order.
_INSERT = """
INSERT INTO outbox (event_type, payload, idempotency_key, payload_digest, trace_context, webhook_id, webhook_seq)
SELECT $1, e.payload::jsonb, e.key, e.digest, $5::jsonb, e.payload::jsonb->>'webhook_id',
       CASE WHEN e.payload::jsonb ? 'webhook_id' THEN nextval('outbox_webhook_seq') END
FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS e(payload, key, digest, place)
ORDER BY e.place
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING idempotency_key"""


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
    if not conn.is_in_transaction():
        raise RuntimeError("enqueue needs an open transaction: the entry must commit with its change")
    if not entries:
        return 0
    carrier = tracing.current_context_carrier()  # the delivery continues the enqueuer's trace
    written = await conn.fetch(
        _INSERT, event_type, [json.dumps(payload) for payload, _ in entries], [key for _, key in entries],
        [payload_digest(payload) for payload, _ in entries], json.dumps(carrier) if carrier else None)
    await conn.execute("SELECT pg_notify($1, '')", NOTIFY_CHANNEL)
    return len(written)

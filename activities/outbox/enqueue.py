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


async def enqueue(conn: asyncpg.Connection, event_type: str, payload: dict[str, Any],
                  idempotency_key: str | None = None) -> str:
    """Write an outbox entry in the caller's open transaction; returns its idempotency key.

    The entry commits or vanishes with the change that caused it. Without a key, the key is derived
    from the event type and payload, so the same event enqueued twice is delivered once. The NOTIFY
    reaches the relay only when the transaction commits.
    """
    if not conn.is_in_transaction():
        raise RuntimeError("enqueue needs an open transaction: the entry must commit with its change")
    digest = payload_digest(payload)
    key = idempotency_key or f"{event_type}-{digest[:32]}"
    carrier = tracing.current_context_carrier()  # the delivery continues the enqueuer's trace
    await conn.execute(
        "INSERT INTO outbox (event_type, payload, idempotency_key, payload_digest, trace_context) "
        "VALUES ($1, $2::jsonb, $3, $4, $5::jsonb) ON CONFLICT (idempotency_key) DO NOTHING",
        event_type, json.dumps(payload), key, digest, json.dumps(carrier) if carrier else None)
    await conn.execute("SELECT pg_notify($1, '')", NOTIFY_CHANNEL)
    return key


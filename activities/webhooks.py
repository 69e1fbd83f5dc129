"""Pushed delivery events: the inbox the webhook receiver fills, applied in batches.

The receiver (operations/webhooks.py) stores each verified event raw in `webhook_inbox` and
NOTIFYs; `apply_inbox` runs for minutes at a time in WebhookInboxWorkflow, woken by that NOTIFY as
the outbox relay is, and applies the oldest rows in batches through the same normalisation and the
same set-based apply as polling (activities/delivery_events/apply.py), deleting them in the apply's own
transaction. Then it recounts the aggregates, at most every AGGREGATE_EVERY_SECONDS while a burst
lasts: statistics move within about a second of the push.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import asyncpg
from pydantic import BaseModel
from temporalio import activity

from activities.delivery_events.aggregates import aggregate
from activities.delivery_events.apply import apply_batch
from activities.heartbeat import wait_for_work, woken_by_notify
from activities.metrics import Instruments
from pressroom.store.events import INBOX_CHANNEL, EventBatch

if TYPE_CHECKING:
    from pressroom.dependencies import Dependencies

INBOX_WORKFLOW_ID = "webhook-inbox"
AGGREGATE_EVERY_SECONDS = 0.5
POLL_SECONDS = 5.0  # a NOTIFY lost (a listener reconnecting) costs at most this long
TOKEN_PURGE_SECONDS = 60.0

_CLAIM = "SELECT id, provider, kind, event, received_at FROM webhook_inbox ORDER BY id LIMIT $1"
_DELETE = "DELETE FROM webhook_inbox WHERE id = ANY($1::bigint[])"
_KINDS = """
INSERT INTO webhook_kinds AS k (provider, kind, applied, last_received_at, last_applied_at)
SELECT provider, kind, n, received, now()
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::timestamptz[]) AS t(provider, kind, n, received)
ON CONFLICT (provider, kind) DO UPDATE SET applied = k.applied + EXCLUDED.applied,
    last_received_at = GREATEST(k.last_received_at, EXCLUDED.last_received_at), last_applied_at = now()"""
_PURGE_TOKENS = "DELETE FROM webhook_tokens WHERE expires_at < now()"
# Acceptances received (SES's Send events) outlive any confirm window by far after a week.
_PURGE_ACCEPTANCES = "DELETE FROM provider_acceptances WHERE received_at < now() - interval '7 days'"
# Set-aside events (pushed or polled) are kept for `analytics rejected` this many days, then go.
_PRUNE_REJECTED = "DELETE FROM delivery_events_rejected WHERE rejected_at < now() - make_interval(days => $1)"


class InboxInput(BaseModel):
    run_seconds: float = 300  # then the workflow calls again (and continues as new now and then)


class InboxResult(BaseModel):
    applied: int = 0  # inbox rows taken (events applied, unknown, or set aside)
    batches: int = 0


class WebhookActivities:
    def __init__(self, deps: Dependencies) -> None:
        self.deps = deps
        self.metrics = Instruments()

    @activity.defn
    async def apply_inbox(self, input: InboxInput) -> InboxResult:
        """Apply the inbox's rows in batches as they arrive, woken by NOTIFY or every POLL_SECONDS.

        Safe to repeat and to overlap (a retry beside a slow predecessor): applying an event again
        changes nothing, and a row is deleted in the transaction that applied it.
        """
        result = InboxResult()
        deadline = time.monotonic() + input.run_seconds
        last_purge = 0.0
        async with woken_by_notify(self.deps.settings.direct_database(), INBOX_CHANNEL) as wake:
            while time.monotonic() < deadline and not activity.is_worker_shutdown():
                activity.heartbeat(result.applied)
                taken = await self._apply_some(result)
                if time.monotonic() - last_purge > TOKEN_PURGE_SECONDS:
                    await self.deps.pool.execute(_PURGE_TOKENS)
                    await self.deps.pool.execute(_PURGE_ACCEPTANCES)
                    await self.deps.pool.execute(_PRUNE_REJECTED, self.deps.settings.rejected_events_keep_days)
                    last_purge = time.monotonic()
                if taken < self.deps.settings.webhook_apply_batch:
                    await wait_for_work(wake, min(POLL_SECONDS, max(0.0, deadline - time.monotonic())),
                                        result.applied)
        return result

    async def _apply_some(self, result: InboxResult) -> int:
        """Apply batches until the inbox is drained (or a batch comes back short); the rows taken."""
        taken, last_aggregate = 0, time.monotonic()
        while True:
            rows = await self.deps.pool.fetch(_CLAIM, self.deps.settings.webhook_apply_batch)
            if rows:
                await self._apply_rows(rows)
                taken += len(rows)
                result.applied += len(rows)
                result.batches += 1
                activity.heartbeat(result.applied)
            drained = len(rows) < self.deps.settings.webhook_apply_batch
            if taken and (drained or time.monotonic() - last_aggregate >= AGGREGATE_EVERY_SECONDS):
                async with self.deps.pool.acquire() as conn, conn.transaction():
                    await aggregate(conn)
                last_aggregate = time.monotonic()
            if drained:
                return taken

    async def _apply_rows(self, rows: list[asyncpg.Record]) -> None:
        started = time.time()
        batch = EventBatch()
        kinds: dict[tuple[str, str], list] = {}
        for row in rows:
            try:
                item = json.loads(row["event"])
            except (ValueError, RecursionError):
                item = None  # the parser sets it aside as "not a JSON object"
            batch.add_one(item, self.deps.provider.parse_event, raw=row["event"])
            seen = kinds.setdefault((row["provider"], row["kind"]), [0, row["received_at"]])
            seen[0] += 1
            seen[1] = max(seen[1], row["received_at"])
        ids = [row["id"] for row in rows]

        async def delete_and_count(conn: asyncpg.Connection) -> None:
            await conn.execute(_DELETE, ids)
            await conn.execute(_KINDS, [p for p, _ in kinds], [k for _, k in kinds],
                               [v[0] for v in kinds.values()], [v[1] for v in kinds.values()])

        applied = await apply_batch(self.deps.pool, batch, "push", delete_and_count)
        self.metrics.counter("pressroom_webhooks_applied", "pushed events taken from the inbox").add(len(rows))
        if applied.rejected:
            self.metrics.counter("pressroom_webhooks_set_aside", "pushed events set aside").add(applied.rejected)
        # From the receiver's commit to this batch's apply, for its oldest row: the inbox's part of push-to-effect.
        self.metrics.histogram_float("pressroom_webhooks_inbox_wait", "longest wait in the inbox per batch",
                                     "ms").record(max(0.0, (started - rows[0]["received_at"].timestamp()) * 1000))

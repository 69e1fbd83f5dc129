"""The relay: due entries claimed, and one delivery workflow started for each."""

from __future__ import annotations

import asyncio
import json
import time

import asyncpg
from temporalio import activity
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy

from activities.heartbeat import wait_for_work, woken_by_notify
from activities.metrics import Instruments
from activities.newsletter.finish import UNFINISHED_EMAILS
from activities.outbox.delivery import UNFINISHED_ENTRIES
from activities.outbox.models import EntryInput, RelayInput, RelayResult, outbox_workflow_id, webhooks_task_queue
from activities.watchdog import Watchdog
from pressroom import tracing
from pressroom.dependencies import Dependencies
from pressroom.store.outbox import NOTIFY_CHANNEL
from pressroom.temporal import OUTBOX_EVENT_TYPE

RELAY_CAP_RECHECK_SECONDS = 0.1  # at the open-deliveries cap, how soon the relay counts again
RELAY_CONCURRENT_STARTS = 64  # workflow starts in flight at once

# Each webhook's next entries in its order, the first `$1` of those not yet handled: those of them
# due are claimed (up to `$2`). A webhook whose first entries are in flight or in their backoff
# gets nothing more until they are done, so its events go out in order, and one slow or dead
# target holds back no other.
_WEBHOOKS_NEXT = """
SELECT o.id, o.idempotency_key, o.event_type, o.created_at, o.trace_context::text, o.webhook_id
FROM outbox o WHERE o.id IN (
  SELECT head.id FROM webhooks w CROSS JOIN LATERAL (
    SELECT id, status, next_run_at FROM outbox
    WHERE webhook_id = w.id AND status IN ('pending', 'sending', 'failed') ORDER BY webhook_seq LIMIT $1) head
  WHERE head.status = 'pending' AND head.next_run_at <= now())
AND o.status = 'pending'
ORDER BY o.webhook_seq LIMIT $2 FOR UPDATE SKIP LOCKED"""


class OutboxRelayActivities:
    def __init__(self, deps: Dependencies) -> None:
        self.pool = deps.pool
        self.settings = deps.settings
        self.temporal = deps.temporal
        self.metrics = Instruments()

    @activity.defn
    async def relay_outbox(self, input: RelayInput) -> RelayResult:
        """Claim due entries and start their delivery workflows, woken by NOTIFY or the poll interval.

        Safe to run several at once and to repeat: rows are claimed with SKIP LOCKED inside the
        transaction that starts their workflows, and a workflow that exists counts as started.
        """
        # Rows of every job whose run closed without finishing them (activities/watchdog.py).
        watchdog = Watchdog(self.pool, self.temporal, self.settings.orphan_check_seconds)
        orphans = asyncio.create_task(watchdog.watch([UNFINISHED_ENTRIES, UNFINISHED_EMAILS]))
        started, deadline = 0, time.monotonic() + input.run_seconds
        try:
            async with woken_by_notify(self.settings.direct_database(), NOTIFY_CHANNEL) as wake:
                while time.monotonic() < deadline and not activity.is_worker_shutdown():
                    activity.heartbeat(started)
                    claimed, at_cap = await self._claim_and_start()
                    started += claimed
                    if at_cap:
                        # Open deliveries finishing send no NOTIFY: look again soon, not a poll interval
                        # later, so that a burst keeps the engine busy at the cap.
                        await wait_for_work(wake, min(RELAY_CAP_RECHECK_SECONDS, deadline - time.monotonic()),
                                            started)
                    elif claimed < self.settings.outbox_batch:
                        await wait_for_work(wake, min(self.settings.outbox_poll_interval_seconds,
                                                      deadline - time.monotonic()), started)
        finally:
            orphans.cancel()
        return RelayResult(started=started)

    async def _claim_and_start(self) -> tuple[int, bool]:
        """Claim up to a batch of due entries and start their deliveries; (started, at the open-deliveries cap)."""


        async with self.pool.acquire() as conn, conn.transaction():
            # Webhooks' deliveries have their own bound (PRESSROOM_WEBHOOKS_IN_FLIGHT per webhook): a slow
            # target's never takes the room of a welcome email.
            open_deliveries = await conn.fetchval(
                "SELECT count(*) FROM outbox WHERE status = 'sending' AND webhook_id IS NULL")
            cap_room = self.settings.outbox_max_open_deliveries - open_deliveries
            room = min(self.settings.outbox_batch, cap_room)
            rows = await conn.fetch(
                "SELECT id, idempotency_key, event_type, created_at, trace_context::text, webhook_id FROM outbox "
                "WHERE status = 'pending' AND webhook_id IS NULL AND next_run_at <= now() "
                "ORDER BY next_run_at, created_at LIMIT $1 FOR UPDATE SKIP LOCKED", room) if room > 0 else []
            rows += await conn.fetch(_WEBHOOKS_NEXT, self.settings.site_webhooks_in_flight, self.settings.outbox_batch)
            if not rows:
                return 0, room <= 0
            # The rows stay locked until every start returns: the starts go out together, a bounded
            # number at once however large PRESSROOM_OUTBOX_BATCH is set.
            slots = asyncio.Semaphore(RELAY_CONCURRENT_STARTS)

            async def start(row: asyncpg.Record) -> None:
                # Each delivery continues the trace of the transaction that enqueued it.
                carrier = json.loads(row["trace_context"]) if row["trace_context"] else None
                async with slots:
                    with tracing.continued_from(carrier):
                        # By its registered name: activities do not import workflow code.
                        await self.temporal.start_workflow(
                            "DeliverOutboxEntryWorkflow",
                            EntryInput(outbox_id=row["id"], max_attempts=self.settings.site_webhooks_max_attempts
                                       if row["webhook_id"] else self.settings.outbox_max_attempts),
                            id=outbox_workflow_id(row['idempotency_key']),
                            task_queue=webhooks_task_queue(activity.info().task_queue) if row["webhook_id"]
                            else activity.info().task_queue,
                            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                            search_attributes=TypedSearchAttributes([SearchAttributePair(OUTBOX_EVENT_TYPE,
                                                                                         row["event_type"])]),
                            static_summary=f"Deliver {row['event_type']} (outbox {row['id']})")

            await asyncio.gather(*(start(row) for row in rows))
            await conn.execute("UPDATE outbox SET status = 'sending', dispatched_at = now(), updated_at = now() "
                               "WHERE id = ANY($1::text[])", [row["id"] for row in rows])
        self.metrics.counter("pressroom_outbox_claimed", "Outbox entries claimed by a relay").add(len(rows))
        latency = self.metrics.histogram_float("pressroom_outbox_latency", "Outbox latency by phase", "ms")
        dispatch = latency.with_additional_attributes({"phase": "commit_to_dispatch"})
        now = time.time()
        for row in rows:
            dispatch.record((now - row["created_at"].timestamp()) * 1000)
        return len(rows), room <= 0 or sum(row["webhook_id"] is None for row in rows) == cap_room

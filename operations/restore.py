"""Runs that PostgreSQL says are under way and Temporal has never heard of: started again at a worker's
start (docs/production.md "Backup and restore").

After PostgreSQL is restored beside an empty Temporal (or a Temporal restored from an older backup), an
email can stay `submitting` and an outbox entry `sending` with no run to finish them. The watchdog
records a row whose run *closed* (someone may have meant to stop it); a run Temporal does not know at
all was lost with Temporal's persistence, so its job is handed back: the send starts again (each batch
not known to be submitted is looked up in the provider's events before it is sent), the entry goes
back to the relay (the ledger and the look-up of an uncertain welcome still stand before any send).
Scheduled posts need nothing here: the posts reconcile gives each its timer again.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from activities.newsletter.lock import lock_holder
from activities.outbox import outbox_workflow_id
from activities.watchdog import NOT_FOUND, run_closed
from operations.newsletter import start_newsletter
from pressroom import database
from pressroom.errors import PressroomError
from pressroom.settings import ConfigurationError, Settings
from pressroom.store.lost_runs import (
    DELIVERIES_UNDER_WAY,
    DELIVERY_BACK_TO_RELAY,
    LOOK_UP_BEFORE_SENDING,
    SENDS_UNDER_WAY,
)
from pressroom.store.outbox import NOTIFY_CHANNEL
from workflows.newsletter_models import newsletter_workflow_id

log = logging.getLogger("pressroom.restore")
CHECK_LIMIT = 1000  # rows looked at per job at one start; the watchdog covers what a restore leaves beyond
CONCURRENT_DESCRIBES = 8


@dataclass(frozen=True)
class LostRuns:
    """What a worker's start handed back: emails whose send started again, entries back to the relay."""

    sends_restarted: list[str] = field(default_factory=list)
    deliveries_requeued: list[str] = field(default_factory=list)


async def restart_lost_runs(client, settings: Settings) -> LostRuns:
    """Every row under way whose run Temporal does not know, handed back to its job. Safe to repeat, and
    from every worker at once: a run that exists (or was just started by another worker) is left alone."""
    pool = await database.connect(settings.require_database(), max_size=CONCURRENT_DESCRIBES)
    try:
        quiet = float(settings.orphan_check_seconds)  # as the watchdog: a row this fresh belongs to a run starting
        sends = await _lost_sends(client, pool, quiet)
        restarted = [email_id for email_id in sends if await _restart_send(client, pool, settings, email_id)]
        deliveries = await _requeue_lost_deliveries(client, pool, quiet)
    finally:
        await pool.close()
    if restarted or deliveries:
        log.warning("runs Temporal does not know, started again: %d sends (%s), %d outbox entries back to the "
                    "relay (PostgreSQL restored beside an empty Temporal?)", len(restarted), ", ".join(restarted),
                    len(deliveries))
    return LostRuns(sends_restarted=restarted, deliveries_requeued=deliveries)


async def _unknown(client, workflow_id: str) -> bool:
    """Temporal holds no run at all of this workflow id (one that closed is the watchdog's to record)."""
    closed = await run_closed(client, workflow_id)
    return closed is not None and closed.status == NOT_FOUND


async def _lost_sends(client, pool, quiet: float) -> list[str]:
    """Emails `submitting` whose lock names a run of this namespace that Temporal does not know."""
    namespace = client.namespace
    slots = asyncio.Semaphore(CONCURRENT_DESCRIBES)

    async def lost(row) -> bool:
        holder_namespace, workflow_id, _ = lock_holder(row["locked_by"], namespace, newsletter_workflow_id(row["id"]))
        if holder_namespace != namespace or workflow_id != newsletter_workflow_id(row["id"]):
            return False  # a lock of another namespace, or of another kind of sender, is not ours to hand back
        async with slots:
            return await _unknown(client, workflow_id)

    rows = await pool.fetch(SENDS_UNDER_WAY, quiet, CHECK_LIMIT)
    found = await asyncio.gather(*(lost(row) for row in rows))
    return [row["id"] for row, is_lost in zip(rows, found, strict=True) if is_lost]


async def _restart_send(client, pool, settings: Settings, email_id: str) -> bool:
    """The send started again, its unsent batches to be looked up first; False when it cannot start
    (its post was unpublished, another worker started it first): said in the log, left as it is."""
    await pool.execute(LOOK_UP_BEFORE_SENDING, email_id)
    try:
        started = await start_newsletter(email_id, client=client, settings=settings)
    except (PressroomError, ConfigurationError) as error:
        log.warning("email %s was being sent and its run is lost; not started again: %s", email_id, error)
        return False
    return started.started


async def _requeue_lost_deliveries(client, pool, quiet: float) -> list[str]:
    slots = asyncio.Semaphore(CONCURRENT_DESCRIBES)

    async def requeue(row) -> str | None:
        async with slots:
            if not await _unknown(client, outbox_workflow_id(row["idempotency_key"])):
                return None
        return await pool.fetchval(DELIVERY_BACK_TO_RELAY, row["id"], row["status"], row["updated_at"])

    rows = await pool.fetch(DELIVERIES_UNDER_WAY, quiet, CHECK_LIMIT)
    requeued = [entry for entry in await asyncio.gather(*(requeue(row) for row in rows)) if entry is not None]
    if requeued:
        await pool.execute("SELECT pg_notify($1, '')", NOTIFY_CHANNEL)
    return requeued

"""The outbox, client side: the relay workflow runs; the operator's counts, one entry, a requeue."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

from temporalio.client import WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy

from activities.outbox import outbox_workflow_id
from activities.outbox.models import RelayInput
from activities.watchdog import run_closed
from operations.answers import OutboxStatus
from operations.common import temporal_client
from operations.site_webhooks import outbox_by_webhook
from pressroom import database
from pressroom.errors import BadInput, NotFound, PressroomError
from pressroom.inputs import email_address, entity_id
from pressroom.settings import Settings, get_settings
from pressroom.store.outbox import NOTIFY_CHANNEL
from workflows.outbox import RELAY_WORKFLOW_ID, OutboxRelayWorkflow


async def delivery_closed_as(client, workflow_id: str, rpc_timeout: timedelta | None = None) -> str | None:
    """How a delivery run closed: its status (COMPLETED, TERMINATED, FAILED, …), NOT_FOUND when Temporal
    holds no such run (never started, or closed longer ago than the namespace keeps runs), or None while
    it runs. Any other answer from Temporal is raised."""
    closed = await run_closed(client, workflow_id, rpc_timeout=rpc_timeout)
    return closed.status if closed is not None else None


async def ensure_relay(client, settings) -> None:
    """The relay workflow runs (one per namespace and task queue); an existing run is kept."""
    await client.start_workflow(OutboxRelayWorkflow.run, RelayInput(),
                                id=f"{RELAY_WORKFLOW_ID}-{settings.task_queue}", task_queue=settings.task_queue,
                                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                                static_summary="Relay committed outbox entries to delivery workflows")


async def outbox_status(settings: Settings | None = None) -> OutboxStatus:
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        counts = {r["status"]: r["n"] for r in await conn.fetch(
            "SELECT status, count(*) AS n FROM outbox GROUP BY status ORDER BY status")}
        oldest = await conn.fetchval("SELECT extract(epoch FROM now() - min(created_at)) FROM outbox "
                                     "WHERE status IN ('pending', 'failed')")
        # Entries put back to wait (a welcome email whose template cannot be rendered), and those
        # skipped, counted by why.
        reasons = await conn.fetch(
            "SELECT status, last_error_code AS code, last_error_msg AS reason, count(*) AS n FROM outbox "
            "WHERE (status = 'pending' AND last_error_code IS NOT NULL) OR status = 'skipped' "
            "GROUP BY 1, 2, 3 ORDER BY 1, 4 DESC, 2, 3")
        site_events = await outbox_by_webhook(conn)
    return OutboxStatus.model_validate({
            **site_events, "counts": counts, "oldest_pending_seconds": float(oldest) if oldest is not None else None,
            "waiting": [{"code": r["code"], "reason": r["reason"], "count": r["n"]}
                        for r in reasons if r["status"] == "pending"],
            "skipped": [{"code": r["code"], "reason": r["reason"], "count": r["n"]}
                        for r in reasons if r["status"] == "skipped"]})


# An entry as operators name it: its id, its idempotency key, its delivery's workflow id, or the
# member it is about (their newest entry), by id or address.
_FIND_ENTRY = """
SELECT o.id AS outbox_id, o.event_type, o.idempotency_key, o.status, o.attempts, o.next_run_at, o.last_error_code,
       o.last_error_msg, o.created_at, o.dispatched_at, o.processed_at, l.status AS ledger,
       o.payload->>'member_id' AS member_id
FROM outbox o LEFT JOIN idempotency_ledger l USING (idempotency_key)
WHERE o.id = $1 OR o.idempotency_key = $1 OR o.idempotency_key = $2
   OR (o.payload ? 'member_id' AND o.payload->>'member_id' = $1)
ORDER BY o.id = $1 DESC, o.idempotency_key IN ($1, $2) DESC, o.created_at DESC, o.id DESC LIMIT 1"""


async def outbox_entry(name: str, settings: Settings | None = None) -> dict:
    """One entry, found by its id, idempotency key, workflow id (outbox-KEY), or the member's id or
    address (their newest entry)."""
    address = email_address(name) if "@" in name else None
    if address is None:
        entity_id(name, "outbox entry")
    settings = settings or get_settings()
    key = name.removeprefix(outbox_workflow_id(""))
    async with database.connection(settings.require_database()) as conn:
        if address is not None:
            member_id = await conn.fetchval("SELECT id FROM members WHERE lower(email) = lower($1)", address)
            if member_id is None:  # the address is not repeated: errors carry none
                raise NotFound("no member has that address (`pressroom members list` shows them)")
            name = key = member_id
        row = await conn.fetchrow(_FIND_ENTRY, name, key)
    if row is None:
        raise NotFound(f"outbox entry {name} does not exist (no entry has that id, key or member; "
                       "`pressroom outbox list` shows them)")
    return dict(row)


# How long a requeue waits for the entry's delivery run to close before refusing.
REQUEUE_WAIT_SECONDS = 10.0


async def requeue_outbox_entry(outbox_id: str, *, client=None, settings: Settings | None = None,
                               wait_seconds: float = REQUEUE_WAIT_SECONDS) -> None:
    """aborted or skipped → pending now, with attempts reset and its failed (or skipped) ledger line
    cleared, so it is tried afresh.

    Its delivery run must have closed first. The row reads aborted a moment before that run closes,
    and the relay starts deliveries keeping an open run of the same id (the entry's idempotency
    key): requeued inside that moment, the entry would be claimed by the closing run and wait in
    `sending` for ever. A run still open after `wait_seconds` is refused, and nothing is written.
    """
    entity_id(outbox_id, "outbox entry")
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        entry = await conn.fetchrow(f"SELECT status, last_error_code, idempotency_key, {_WEBHOOK_GONE} FROM outbox o "
                                    "WHERE id = $1", outbox_id)
    _requeueable(outbox_id, entry)
    await _delivery_closed(client or await temporal_client(settings), outbox_id, entry["idempotency_key"],
                           wait_seconds)
    async with database.connection(settings.require_database()) as conn, conn.transaction():
        # Read again under the lock: while the run closed, the entry may have been requeued.
        _requeueable(outbox_id, await conn.fetchrow(
            f"SELECT status, last_error_code, {_WEBHOOK_GONE} FROM outbox o WHERE id = $1 FOR UPDATE", outbox_id))
        # A skipped entry's line says succeeded with nothing sent: without it, the entry is handled again.
        await conn.execute(
            "DELETE FROM idempotency_ledger WHERE (status = 'failed' OR result ? 'skipped') AND idempotency_key = "
            "(SELECT idempotency_key FROM outbox WHERE id = $1)", outbox_id)
        # A welcome email whose send was uncertain keeps that outcome (it is looked up first) and
        # gets a fresh budget of sends.
        await conn.execute(
            "UPDATE automated_email_recipients SET send_attempts = 0 WHERE provider_id IS NULL AND member_id = "
            "(SELECT payload->>'member_id' FROM outbox WHERE id = $1 AND event_type = 'MemberCreatedEvent')",
            outbox_id)
        await conn.execute(
            "UPDATE outbox SET status = 'pending', attempts = 0, next_run_at = now(), last_error_code = NULL, "
            "last_error_msg = NULL, processed_at = NULL, updated_at = now() WHERE id = $1", outbox_id)
        await conn.execute("SELECT pg_notify($1, '')", NOTIFY_CHANNEL)


# A waiting entry is not requeued: its delivery holds it and handles it again on its own.
REQUEUE_STATES = ("aborted", "skipped")
# A site event whose webhook was removed, or whose body was cleared, has nothing to go to or to send.
_WEBHOOK_GONE = ("(o.webhook_id IS NOT NULL AND (NOT o.payload ? 'body' "
                 "OR NOT EXISTS (SELECT 1 FROM webhooks w WHERE w.id = o.webhook_id))) AS webhook_gone")


def _requeueable(outbox_id: str, entry) -> None:
    if entry is None:
        raise NotFound(f"outbox entry {outbox_id} does not exist")
    if entry["webhook_gone"]:
        raise BadInput(f"outbox entry {outbox_id} cannot be requeued: its webhook was removed or its body cleared")
    if entry["status"] not in REQUEUE_STATES:
        raise BadInput(f"outbox entry {outbox_id} is {entry['status']}; only an aborted or skipped entry can be "
                       "requeued" + (" (a waiting one goes out on its own once what it waits for is fixed)"
                                     if entry["status"] == "pending" and entry["last_error_code"] else ""))


@dataclass(frozen=True)
class Requeued:
    requeued: list[str]  # entry ids pending again
    refused: dict[str, str]  # entry id: why it was not requeued (its delivery still running…)


async def requeue_outbox_entries(state: str = "aborted", reason: str | None = None, *, client=None,
                                 settings: Settings | None = None,
                                 wait_seconds: float = REQUEUE_WAIT_SECONDS) -> Requeued:
    """Every entry in `state` (aborted or skipped), with the error or skip code `reason` if given,
    requeued as `requeue_outbox_entry` requeues one; each on its own, so one whose delivery is
    still running is named and the others go ahead."""
    if state not in REQUEUE_STATES:
        raise BadInput(f"--state {state!r} is not one of {', '.join(REQUEUE_STATES)}")
    if reason is not None:
        entity_id(reason, "reason")
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        ids = [row["id"] for row in await conn.fetch(
            "SELECT id FROM outbox WHERE status = $1 AND ($2::text IS NULL OR last_error_code = $2) "
            "ORDER BY created_at, id", state, reason)]
    client = client or (await temporal_client(settings) if ids else None)
    requeued, refused = [], {}
    for outbox_id in ids:
        try:
            await requeue_outbox_entry(outbox_id, client=client, settings=settings, wait_seconds=wait_seconds)
            requeued.append(outbox_id)
        except PressroomError as error:  # requeued meanwhile, or its delivery still running
            refused[outbox_id] = str(error)
    return Requeued(requeued, refused)


async def _delivery_closed(client, outbox_id: str, idempotency_key: str, wait_seconds: float) -> None:
    """Returns once the entry's delivery run has closed (or none exists), waiting up to `wait_seconds`."""
    handle = client.get_workflow_handle(outbox_workflow_id(idempotency_key))
    if await delivery_closed_as(client, handle.id) is not None:
        return
    try:
        await asyncio.wait_for(handle.result(), wait_seconds)
    except WorkflowFailureError:  # closed all the same (failed, terminated, cancelled or timed out)
        pass
    except TimeoutError:
        raise PressroomError(f"outbox entry {outbox_id} was not requeued: its delivery (workflow {handle.id}) "
                             f"is still running after {wait_seconds:g} s; requeue it once it has closed") from None

"""Delivery: one entry handled once (the ledger asked first), recorded succeeded or aborted; and the
entries whose delivery run closed without finishing them (the watchdog's outbox job)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import asyncpg
from pydantic import BaseModel, ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.automated_email import TemplateWaiting
from activities.confirm import StillConfirming
from activities.errors import non_retryable
from activities.heartbeat import heartbeating
from activities.metrics import Instruments
from activities.outbox.models import (
    ERROR_LIMIT,
    EVENT_TYPES,
    SITE_EVENTS,
    AbortEntryInput,
    CompleteEntryInput,
    EntryInput,
    EntryResult,
    MemberCreatedEvent,
    SiteWebhookEvent,
    outbox_workflow_id,
)
from activities.outbox.site_webhook import SiteWebhooks
from activities.outbox.welcome import WelcomeEmails
from activities.provider_errors import retried
from activities.watchdog import ClosedRun, Job, Watched
from pressroom.dependencies import Dependencies
from pressroom.store.outbox import NOTIFY_CHANNEL

HANDLE_FIRST_HEARTBEAT_SECONDS = 2.0  # well inside handle_entry's 10 s heartbeat timeout
# PRESSROOM_OUTBOX_DELETE_ON_SUCCESS's failure, as the reference says it.
DELETE_FAILED = "Processed, but failed to delete outbox entry"

# The ledger's line for a handled entry ($1 the outbox id, $2 the handler's result), and the entry's state.
LEDGER_SUCCEEDED = ("INSERT INTO idempotency_ledger (idempotency_key, payload_digest, status, result) "
                    "SELECT idempotency_key, payload_digest, 'succeeded', $2::jsonb FROM outbox WHERE id = $1 "
                    "ON CONFLICT (idempotency_key) DO UPDATE SET status = 'succeeded', result = EXCLUDED.result, "
                    "updated_at = now()")
# A site webhook's entry keeps no body once handled: the payload's personal data (a deleted member's
# too) leaves the outbox with the delivery; the webhook and the resource's id stay for the operator.
BODY_CLEARED = "payload = CASE WHEN webhook_id IS NULL THEN payload ELSE payload - 'body' END"
# A success is an attempt too: the failed ones recorded before it, and this one (counted once).
ENTRY_SUCCEEDED = ("UPDATE outbox SET status = 'succeeded', attempts = attempts + (status <> 'succeeded')::int, "
                   f"processed_at = now(), updated_at = now(), {BODY_CLEARED} WHERE id = $1")
# The handler's activity records its entry only while the entry is still being delivered (`sending`):
# an attempt that outlives its terminated run writes nothing to an entry the watchdog aborted (nor
# to one another run finished), as its failures do not. Row and ledger line in one statement ($1 the
# outbox id, $2 the result); the entry kept as succeeded, or deleted (PRESSROOM_OUTBOX_DELETE_ON_SUCCESS).
_LEDGER_OF_ENTRY = ("INSERT INTO idempotency_ledger (idempotency_key, payload_digest, status, result) "
                    "SELECT idempotency_key, payload_digest, 'succeeded', $2::jsonb FROM entry "
                    "ON CONFLICT (idempotency_key) DO UPDATE SET status = 'succeeded', result = EXCLUDED.result, "
                    "updated_at = now() RETURNING 1")
OPEN_ENTRY_SUCCEEDED = ("WITH entry AS (UPDATE outbox SET status = 'succeeded', attempts = attempts + 1, "
                        f"processed_at = now(), updated_at = now(), {BODY_CLEARED} "
                        "WHERE id = $1 AND status = 'sending' RETURNING idempotency_key, payload_digest) "
                        + _LEDGER_OF_ENTRY)
# A handler that found nothing to send (its result says `skipped`, with a code and why): the entry
# reads skipped, with them, and is kept whatever PRESSROOM_OUTBOX_DELETE_ON_SUCCESS says, for the
# operator to read (and `outbox requeue --state skipped` to try again once there is something to
# send). The ledger line says succeeded: the key was handled.
SKIPPED = ("status = 'skipped', last_error_code = $2::jsonb->>'code', "
           f"last_error_msg = left($2::jsonb->>'skipped', {ERROR_LIMIT}), processed_at = now(), updated_at = now(), "
           + BODY_CLEARED)
OPEN_ENTRY_SKIPPED = (f"WITH entry AS (UPDATE outbox SET {SKIPPED} "
                      "WHERE id = $1 AND status = 'sending' RETURNING idempotency_key, payload_digest) "
                      + _LEDGER_OF_ENTRY)
# The entry waits, pending, for what it needs (TemplateWaiting), with why; its delivery waits on a
# durable timer and handles it again (no new run, so no start racing the closing one). next_run_at
# ($3 seconds on) is past that wait by WAITING_RELAY_GRACE: only a delivery that died meanwhile
# leaves the entry for the relay to start again.
ENTRY_WAITING = ("UPDATE outbox SET status = 'pending', last_error_code = $2, last_error_msg = left($4, 2000), "
                 "next_run_at = now() + make_interval(secs => $3), updated_at = now() "
                 "WHERE id = $1 AND status IN ('sending', 'failed') RETURNING id")
WAITING_RELAY_GRACE = 120.0
# Waiting longer, it looks less often: a quarter of the time waited so far, between
# PRESSROOM_WELCOME_TEMPLATE_RETRY_SECONDS and this, so a template broken for a week costs its
# deliveries a few hundred looks each, and a fixed one goes out within this.
WAITING_MAX_SECONDS = 900.0
OPEN_ENTRY_DELETED = ("WITH entry AS (DELETE FROM outbox WHERE id = $1 AND status = 'sending' "
                      "RETURNING idempotency_key, payload_digest) " + _LEDGER_OF_ENTRY)
# The ledger's line for an aborted entry ($1 the outbox id, $2 the error code). A line that succeeded,
# or that belongs to another payload (the IDEMPOTENCY_CONFLICT case), is left exactly as it is.
LEDGER_FAILED = ("INSERT INTO idempotency_ledger (idempotency_key, payload_digest, status, error_code) "
                 "SELECT idempotency_key, payload_digest, 'failed', $2 FROM outbox WHERE id = $1 "
                 "ON CONFLICT (idempotency_key) DO UPDATE SET status = 'failed', error_code = EXCLUDED.error_code, "
                 "updated_at = now() WHERE idempotency_ledger.status <> 'succeeded' "
                 "AND idempotency_ledger.payload_digest = EXCLUDED.payload_digest")



class OutboxDeliveryActivities:
    def __init__(self, deps: Dependencies) -> None:
        self.pool = deps.pool
        self.settings = deps.settings
        self.metrics = Instruments()
        self.welcome = WelcomeEmails(deps)
        self.site_webhooks = SiteWebhooks(deps)
        # Each type's handler, bound to this instance once, from EVENT_TYPES.
        self.handlers: dict[str, Callable[[BaseModel, str, EntryInput], Awaitable[dict[str, Any]]]] = {
            name: getattr(self, event_type.handler) for name, event_type in EVENT_TYPES.items()}

    async def _ledger_decides(self, outbox_id: str, entry: asyncpg.Record) -> EntryResult | None:
        """The ledger decides first: a key that succeeded is not handled again (W-105), and a digest
        that differs is IDEMPOTENCY_CONFLICT. None: go on and handle the entry."""
        if entry["ledger_digest"] is not None and entry["ledger_digest"] != entry["payload_digest"]:
            raise non_retryable("IDEMPOTENCY_CONFLICT",
                                "the ledger holds this idempotency key with a different payload")
        if entry["ledger_status"] == "succeeded":
            await self._finish(outbox_id)
            return EntryResult(result=json.loads(entry["ledger_result"] or "{}"), already_succeeded=True)
        return None

    @staticmethod
    def _event(event_type: str, payload: str) -> BaseModel:
        known = EVENT_TYPES.get(event_type)
        if known is None:
            raise non_retryable("UNKNOWN_EVENT_TYPE", f"no handler for event type {event_type!r}")
        try:
            return known.payload.model_validate_json(payload)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "payload"
            raise non_retryable("INVALID_PAYLOAD",
                                f"{event_type} payload is invalid: {where}: {first['msg']}") from None

    @activity.defn
    async def handle_entry(self, input: EntryInput) -> EntryResult:
        """Ask the ledger, then run the event type's handler; a failure is recorded and retried on the
        protocol's backoff. An unknown type or an invalid payload is aborted at once."""
        # Most entries are handled in milliseconds: the first heartbeat waits, so that they cost
        # the engine no heartbeat request (the timeout is 10 s; a slow handler still beats).
        async with heartbeating(first_after=HANDLE_FIRST_HEARTBEAT_SECONDS):
            # The entry and its ledger line in one statement (one snapshot, one round trip).
            row = await self.pool.fetchrow(
                "SELECT o.event_type, o.payload::text AS payload, o.idempotency_key, o.status, o.payload_digest, "
                "l.status AS ledger_status, l.payload_digest AS ledger_digest, l.result::text AS ledger_result "
                "FROM outbox o LEFT JOIN idempotency_ledger l ON l.idempotency_key = o.idempotency_key "
                "WHERE o.id = $1", input.outbox_id)
            if row is None:
                raise non_retryable("ENTRY_NOT_FOUND", f"outbox entry {input.outbox_id} does not exist")
            return await self._ledger_decides(input.outbox_id, row) or await self._handle_entry(input, row)

    async def _handle_entry(self, input: EntryInput, row: asyncpg.Record) -> EntryResult:
        event = self._event(row["event_type"], row["payload"])
        attempt = activity.info().attempt
        if row["status"] in ("failed", "pending"):
            # The backoff (or the wait for an uncertain send's events, or for a template) is over: the
            # protocol's failed → pending → sending. The entry's own delivery workflow held the wait,
            # so no relay has claimed it and it is sent again at once.
            await self.pool.execute("UPDATE outbox SET status = 'sending', updated_at = now() "
                                    "WHERE id = $1 AND status IN ('failed', 'pending')", input.outbox_id)
        try:
            result = await self.handlers[row["event_type"]](event, row["idempotency_key"], input)
        except StillConfirming as waiting:
            return EntryResult(result={}, confirm_in_seconds=waiting.wait_seconds)
        except TemplateWaiting as waiting:
            least = self.settings.welcome_template_retry_seconds
            waited = await self.pool.fetchval(
                "SELECT extract(epoch FROM now() - created_at)::float8 FROM outbox WHERE id = $1", input.outbox_id)
            wait = min(max(least, (waited or 0) / 4), max(least, WAITING_MAX_SECONDS))
            await self.pool.fetchval(ENTRY_WAITING, input.outbox_id, waiting.code, wait + WAITING_RELAY_GRACE,
                                     str(waiting))
            self._count("waiting")
            return EntryResult(result={}, confirm_in_seconds=wait)
        except ApplicationError:
            raise
        except Exception as error:  # noqa: BLE001 (the handler's failure, in its own words, kept for `outbox show`)
            code = type(error).__name__
            message = str(error)[:ERROR_LIMIT] or code
            backoff = self.settings.outbox_backoff_seconds
            delay = backoff[min(attempt - 1, len(backoff) - 1)]
            # Only an entry still open: an attempt that outlived its run (terminated, then the entry
            # aborted by the relay's check, or requeued and sent by another run) must not reopen it.
            await self.pool.execute(
                "UPDATE outbox SET status = 'failed', attempts = $2, last_error_code = $3, last_error_msg = $4, "
                "next_run_at = now() + make_interval(secs => $5), updated_at = now() "
                "WHERE id = $1 AND status IN ('sending', 'failed')",
                input.outbox_id, attempt, code, message, float(delay))
            self.metrics.counter("pressroom_outbox_retries", "Failed handler attempts").add(1)
            raise ApplicationError(message, type=code, non_retryable=not retried(error),
                                   next_retry_delay=timedelta(seconds=delay)) from None
        completed = await self._completed_here(input, result)
        if row["event_type"] in SITE_EVENTS and completed.completed:
            await self._wake_relay()  # the webhook's next entry may go now
        return completed

    async def _completed_here(self, input: EntryInput, result: dict[str, Any]) -> EntryResult:
        """The entry recorded succeeded in this activity, sparing the delivery a step of its own.

        Exactly once holds: a retry of this activity asks the ledger first. Should the write fail,
        the handler's work is done all the same and is not retried for a database fault: the
        delivery records it in its own step, which waits out the database.
        """
        if not input.complete:
            return EntryResult(result=result)
        statement = OPEN_ENTRY_SKIPPED if "skipped" in result else \
            OPEN_ENTRY_DELETED if self.settings.outbox_delete_on_success else OPEN_ENTRY_SUCCEEDED
        try:
            recorded = await self.pool.fetchval(statement, input.outbox_id, json.dumps(result))
        except Exception as error:  # noqa: BLE001 (the handler's work is done; recording it is retried by the delivery)
            activity.logger.warning("outbox entry %s: handled, not yet recorded (%s); the delivery records it",
                                    input.outbox_id, type(error).__name__)
            return EntryResult(result=result)
        if recorded is None:  # no longer `sending`: its run's own step (if the run is open) records it
            return EntryResult(result=result)
        self._count("skipped" if "skipped" in result else "succeeded")
        return EntryResult(result=result, completed=True)

    @activity.defn
    async def complete_entry(self, input: CompleteEntryInput) -> None:
        """The entry handled: its ledger line and state written (see `_complete`)."""
        await self._complete(input.outbox_id, input.result)

    async def _complete(self, outbox_id: str, result: dict[str, Any]) -> None:
        """Ledger first, then the outbox row: succeeded, or deleted (completed if the delete fails).

        Kept rows: the ledger line and the row's state in one statement, so both commit or neither.
        """
        if "skipped" in result:
            await self.pool.execute(
                f"WITH ledger AS ({LEDGER_SUCCEEDED}) UPDATE outbox SET {SKIPPED} WHERE id = $1",
                outbox_id, json.dumps(result))
            self._count("skipped")
            return
        if self.settings.outbox_delete_on_success:
            await self.pool.execute(LEDGER_SUCCEEDED, outbox_id, json.dumps(result))
            await self._finish(outbox_id)
        else:
            await self.pool.execute(f"WITH ledger AS ({LEDGER_SUCCEEDED}) {ENTRY_SUCCEEDED}", outbox_id,
                                    json.dumps(result))
        self._count("succeeded")

    async def _finish(self, outbox_id: str) -> None:
        if self.settings.outbox_delete_on_success:
            try:
                await self.pool.execute("DELETE FROM outbox WHERE id = $1", outbox_id)
                return
            except asyncpg.PostgresError as error:
                # Handled all the same: kept as completed, with the reference's words for why it is still here.
                activity.logger.warning("outbox entry %s: %s (%s: %s)", outbox_id, DELETE_FAILED,
                                        type(error).__name__, error)
                await self.pool.execute("UPDATE outbox SET status = 'completed', last_error_msg = $2, "
                                        "processed_at = now(), updated_at = now() WHERE id = $1",
                                        outbox_id, DELETE_FAILED)
                return
        await self.pool.execute(ENTRY_SUCCEEDED, outbox_id)

    @activity.defn
    async def abort_entry(self, input: AbortEntryInput) -> None:
        """Retries are exhausted or retrying cannot help: ledger failed, outbox aborted with the reason.

        The ledger is the source of truth: a line that succeeded, or that belongs to another payload
        (the IDEMPOTENCY_CONFLICT case), is left exactly as it is.
        """
        message = input.message[:ERROR_LIMIT]
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(LEDGER_FAILED, input.outbox_id, input.code)
            await conn.execute(
                "UPDATE outbox SET status = 'aborted', last_error_code = $2, last_error_msg = $3, "
                "next_run_at = least(next_run_at, now()), processed_at = now(), updated_at = now() WHERE id = $1",
                input.outbox_id, input.code, message)
        await self._wake_relay()  # a webhook's next entry may go now
        self._count("aborted")

    async def _wake_relay(self) -> None:
        """A webhook's entry done frees its place in that webhook's order; the relay hears of it now,
        not a poll interval later."""
        await self.pool.execute("SELECT pg_notify($1, '')", NOTIFY_CHANNEL)

    def _count(self, outcome: str) -> None:
        self.metrics.counter("pressroom_outbox_processed", "Outbox entries by outcome").add(1, {"outcome": outcome})


    # --- handlers ---

    async def _noop(self, event: BaseModel, key: str, input: EntryInput) -> dict[str, Any]:
        return {}

    async def _welcome_member(self, event: MemberCreatedEvent, key: str, input: EntryInput) -> dict[str, Any]:
        return await self.welcome.send(event, key, input)

    async def _site_webhook(self, event: SiteWebhookEvent, key: str, input: EntryInput) -> dict[str, Any]:
        return await self.site_webhooks.deliver(event, key, input.outbox_id, activity.info().attempt)


# --- entries whose delivery run closed without finishing them (the watchdog's outbox job) ---------

async def _unfinished_entries(pool: asyncpg.Pool, older_than: float, after: str | None, limit: int) -> list[Watched]:
    """Entries `sending`, or `failed` in a retry's backoff, unchanged for `older_than` seconds (a
    delivery that just started is running), oldest first after `after`."""
    rows = await pool.fetch(
        "SELECT id, idempotency_key, status, updated_at FROM outbox WHERE status IN ('sending', 'failed') "
        "AND updated_at < now() - make_interval(secs => $1) "
        "AND ($2::timestamptz IS NULL OR (updated_at, id) > ($2, $3)) ORDER BY updated_at, id LIMIT $4",
        older_than, after[0] if after else None, after[1] if after else "", limit)
    return [Watched(row, outbox_workflow_id(row["idempotency_key"])) for row in rows]


async def _abort_unfinished_entry(pool: asyncpg.Pool, watched: Watched, closed: ClosedRun) -> str | None:
    """Aborted with DELIVERY_CLOSED, not retried: whoever terminated its delivery may have meant to
    stop it, and, `sending`, it would hold a place under PRESSROOM_OUTBOX_MAX_OPEN_DELIVERIES for ever. `outbox
    requeue` sends it, once (the ledger and the look-up of an uncertain send see to that)."""
    row = watched.row
    message = (f"its delivery run (workflow {watched.workflow_id}) {closed.how()} without finishing the entry; "
               "requeue it to send it")[:ERROR_LIMIT]
    async with pool.acquire() as conn, conn.transaction():
        # Only the row as it was read: an entry its run moved on since then is that run's.
        aborted = await conn.fetchval(
            "UPDATE outbox SET status = 'aborted', last_error_code = 'DELIVERY_CLOSED', last_error_msg = $4, "
            "next_run_at = least(next_run_at, now()), processed_at = now(), updated_at = now() "
            "WHERE id = $1 AND status = $2 AND updated_at = $3 "
            "RETURNING id", row["id"], row["status"], row["updated_at"], message)
        if aborted is None:
            return None
        await conn.execute(LEDGER_FAILED, row["id"], "DELIVERY_CLOSED")
    return message


UNFINISHED_ENTRIES = Job("outbox entry", _unfinished_entries, _abort_unfinished_entry,
                         cursor=lambda watched: (watched.row["updated_at"], watched.row["id"]))

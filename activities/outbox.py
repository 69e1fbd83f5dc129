"""The transactional outbox: enqueue in the caller's transaction, relay, deliver.

Service → job → per-entry processing → handler, as in Ghost: `enqueue` writes an entry beside the
domain change; `relay_outbox` claims due entries and starts one DeliverOutboxEntryWorkflow each;
the delivery runs `handle_entry` (one handler per event type) with the protocol's retries; the
ledger is written before the outbox row, so a key that succeeded is never handled again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import asyncpg
from pydantic import BaseModel, ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.confirm import StillConfirming, confirm_wait, lookup_window, uncertain_sends_exhausted
from activities.errors import non_retryable
from activities.heartbeat import heartbeating, wait_for_work, woken_by_notify
from activities.metrics import Instruments
from activities.newsletter.finish import UNFINISHED_EMAILS
from activities.watchdog import ClosedRun, Job, Watchdog, Watched, run_closed
from pressroom import tracing
from pressroom.dependencies import Dependencies
from pressroom.email_rendering import ContentError, Rendered, header_text, mailbox, member_values, render_automated
from pressroom.providers.port import ACCEPTED, UNCERTAIN, Message, ProviderError, ProviderRejected

NOTIFY_CHANNEL = "pressroom_outbox"
RELAY_CAP_RECHECK_SECONDS = 0.1  # at the open-deliveries cap, how soon the relay counts again
RELAY_CONCURRENT_STARTS = 64  # workflow starts in flight at once
HANDLE_FIRST_HEARTBEAT_SECONDS = 2.0  # well inside handle_entry's 10 s heartbeat timeout
ERROR_LIMIT = 2000  # stored error text is capped: enough to diagnose, and a row stays small
OUTBOX_MARK = "pressroom-outbox"  # the v: variable that proves which entry a welcome email carried
OUTBOX_WORKFLOW_PREFIX = "outbox-"
DELETE_FAILED = "Processed, but failed to delete outbox entry"  # PRESSROOM_OUTBOX_DELETE_ON_SUCCESS, as the reference says it


# --- event types and their handlers -------------------------------------------------------------

class MemberCreatedEvent(BaseModel):
    member_id: str


class NoopEvent(BaseModel):
    """Does nothing: for benchmarks and smoke checks of the pipeline itself."""


@dataclass(frozen=True)
class EventType:
    """An event type the outbox delivers: the model its payload must fit, and the OutboxActivities
    method that handles it."""
    payload: type[BaseModel]
    handler: str


# The one registry of event types: a new type is one line here and its handler method.
EVENT_TYPES: dict[str, EventType] = {
    "MemberCreatedEvent": EventType(MemberCreatedEvent, "_welcome_member"),
    "NoopEvent": EventType(NoopEvent, "_noop"),
}

# The automated email each member status is welcomed with. Comped members have none of their own:
# they get the paid one, as the reference platform does.
WELCOME_EMAIL_SLUGS = {"free": "member-welcome-email-free", "paid": "member-welcome-email-paid",
                       "comped": "member-welcome-email-paid"}


def outbox_workflow_id(idempotency_key: str) -> str:
    """The delivery workflow's id: the entry's idempotency key, so one entry is delivered by one run."""
    return f"{OUTBOX_WORKFLOW_PREFIX}{idempotency_key}"


async def delivery_closed_as(client, workflow_id: str, rpc_timeout: timedelta | None = None) -> str | None:
    """How a delivery run closed: its status (COMPLETED, TERMINATED, FAILED, …), NOT_FOUND when Temporal
    holds no such run (never started, or closed longer ago than the namespace keeps runs), or None while
    it runs. Any other answer from Temporal is raised."""
    closed = await run_closed(client, workflow_id, rpc_timeout=rpc_timeout)
    return closed.status if closed is not None else None


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


# --- inputs and results ---------------------------------------------------------------------------

class RelayInput(BaseModel):
    run_seconds: float = 300  # then the workflow calls again (and continues as new now and then)


class RelayResult(BaseModel):
    started: int


class EntryInput(BaseModel):
    outbox_id: str
    max_attempts: int = 6  # the protocol's MAX_ATTEMPTS, from the relay's settings
    # The delivery waits on a timer for an uncertain send's events when asked to
    # (EntryResult.confirm_in_seconds). False: deliveries started before that existed resend at once.
    confirm: bool = False
    # True: the handler's activity records the entry succeeded itself once the handler returns (the
    # ledger says so before a retry could handle it again). False: deliveries started before that
    # existed complete it in a step of their own.
    complete: bool = False


class EntryResult(BaseModel):
    result: dict[str, Any]
    already_succeeded: bool = False  # the ledger had it (W-105, README "The outbox"): nothing was handled
    # Set when an uncertain send is not in the provider's events yet: nothing was sent; handle again then.
    confirm_in_seconds: float | None = None
    completed: bool = False  # the ledger line and the entry's state are written (EntryInput.complete)


class CompleteEntryInput(BaseModel):
    outbox_id: str
    result: dict[str, Any]


class AbortEntryInput(BaseModel):
    outbox_id: str
    code: str
    message: str


# The ledger's line for a handled entry ($1 the outbox id, $2 the handler's result), and the entry's state.
LEDGER_SUCCEEDED = ("INSERT INTO idempotency_ledger (idempotency_key, payload_digest, status, result) "
                    "SELECT idempotency_key, payload_digest, 'succeeded', $2::jsonb FROM outbox WHERE id = $1 "
                    "ON CONFLICT (idempotency_key) DO UPDATE SET status = 'succeeded', result = EXCLUDED.result, "
                    "updated_at = now()")
# A success is an attempt too: the failed ones recorded before it, and this one.
ENTRY_SUCCEEDED = ("UPDATE outbox SET status = 'succeeded', attempts = attempts + 1, processed_at = now(), "
                   "updated_at = now() WHERE id = $1")
# The handler's activity records its entry only while the entry is still being delivered (`sending`):
# an attempt that outlives its terminated run writes nothing to an entry the watchdog aborted (nor
# to one another run finished), as its failures do not. Row and ledger line in one statement ($1 the
# outbox id, $2 the result); the entry kept as succeeded, or deleted (PRESSROOM_OUTBOX_DELETE_ON_SUCCESS).
_LEDGER_OF_ENTRY = ("INSERT INTO idempotency_ledger (idempotency_key, payload_digest, status, result) "
                    "SELECT idempotency_key, payload_digest, 'succeeded', $2::jsonb FROM entry "
                    "ON CONFLICT (idempotency_key) DO UPDATE SET status = 'succeeded', result = EXCLUDED.result, "
                    "updated_at = now() RETURNING 1")
OPEN_ENTRY_SUCCEEDED = ("WITH entry AS (UPDATE outbox SET status = 'succeeded', attempts = attempts + 1, "
                        "processed_at = now(), updated_at = now() "
                        "WHERE id = $1 AND status = 'sending' RETURNING idempotency_key, payload_digest) "
                        + _LEDGER_OF_ENTRY)
OPEN_ENTRY_DELETED = ("WITH entry AS (DELETE FROM outbox WHERE id = $1 AND status = 'sending' "
                      "RETURNING idempotency_key, payload_digest) " + _LEDGER_OF_ENTRY)
# The ledger's line for an aborted entry ($1 the outbox id, $2 the error code). A line that succeeded,
# or that belongs to another payload (the IDEMPOTENCY_CONFLICT case), is left exactly as it is.
LEDGER_FAILED = ("INSERT INTO idempotency_ledger (idempotency_key, payload_digest, status, error_code) "
                 "SELECT idempotency_key, payload_digest, 'failed', $2 FROM outbox WHERE id = $1 "
                 "ON CONFLICT (idempotency_key) DO UPDATE SET status = 'failed', error_code = EXCLUDED.error_code, "
                 "updated_at = now() WHERE idempotency_ledger.status <> 'succeeded' "
                 "AND idempotency_ledger.payload_digest = EXCLUDED.payload_digest")


@dataclass(frozen=True)
class WelcomeMessage:
    rendered: Rendered
    from_address: str
    reply_to: str | None


class OutboxActivities:
    def __init__(self, deps: Dependencies) -> None:
        self.pool = deps.pool
        self.provider = deps.provider
        self.settings = deps.settings
        self.temporal = deps.temporal
        self.metrics = Instruments()
        # Each type's handler, bound to this instance once, from EVENT_TYPES.
        self.handlers: dict[str, Callable[[BaseModel, str, EntryInput], Awaitable[dict[str, Any]]]] = {
            name: getattr(self, event_type.handler) for name, event_type in EVENT_TYPES.items()}

    # --- the relay ---

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
            async with woken_by_notify(self.settings.database_url, NOTIFY_CHANNEL) as wake:
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
        from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy

        from pressroom.temporal import OUTBOX_EVENT_TYPE

        async with self.pool.acquire() as conn, conn.transaction():
            open_deliveries = await conn.fetchval("SELECT count(*) FROM outbox WHERE status = 'sending'")
            cap_room = self.settings.outbox_max_open_deliveries - open_deliveries
            room = min(self.settings.outbox_batch, cap_room)
            if room <= 0:
                return 0, True
            rows = await conn.fetch(
                "SELECT id, idempotency_key, event_type, created_at, trace_context::text FROM outbox "
                "WHERE status = 'pending' AND next_run_at <= now() ORDER BY next_run_at, created_at "
                "LIMIT $1 FOR UPDATE SKIP LOCKED", room)
            if not rows:
                return 0, False
            # The rows stay locked until every start returns: the starts go out together, a bounded
            # number at once however large PRESSROOM_OUTBOX_BATCH is set.
            slots = asyncio.Semaphore(RELAY_CONCURRENT_STARTS)

            async def start(row) -> None:
                # Each delivery continues the trace of the transaction that enqueued it.
                carrier = json.loads(row["trace_context"]) if row["trace_context"] else None
                async with slots:
                    with tracing.continued_from(carrier):
                        # By its registered name: activities do not import workflow code.
                        await self.temporal.start_workflow(
                            "DeliverOutboxEntryWorkflow",
                            EntryInput(outbox_id=row["id"], max_attempts=self.settings.outbox_max_attempts),
                            id=outbox_workflow_id(row['idempotency_key']), task_queue=activity.info().task_queue,
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
        return len(rows), len(rows) == cap_room

    # --- one entry ---

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
        if row["status"] == "failed":
            # The backoff (or the wait for an uncertain send's events) is over: the protocol's failed →
            # pending → sending. The entry's own delivery workflow held the wait, so no relay can
            # claim it and it is sent again at once.
            await self.pool.execute("UPDATE outbox SET status = 'sending', updated_at = now() "
                                    "WHERE id = $1 AND status = 'failed'", input.outbox_id)
        try:
            result = await self.handlers[row["event_type"]](event, row["idempotency_key"], input)
        except StillConfirming as waiting:
            return EntryResult(result={}, confirm_in_seconds=waiting.wait_seconds)
        except ApplicationError:
            raise
        except Exception as error:  # the handler's failure, in its own words, kept for `outbox show`
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
            raise ApplicationError(message, type=code, non_retryable=isinstance(error, ProviderRejected),
                                   next_retry_delay=timedelta(seconds=delay)) from None
        return await self._completed_here(input, result)

    async def _completed_here(self, input: EntryInput, result: dict[str, Any]) -> EntryResult:
        """The entry recorded succeeded in this activity, sparing the delivery a step of its own.

        Exactly once holds: a retry of this activity asks the ledger first. Should the write fail,
        the handler's work is done all the same and is not retried for a database fault: the
        delivery records it in its own step, which waits out the database.
        """
        if not input.complete:
            return EntryResult(result=result)
        statement = OPEN_ENTRY_DELETED if self.settings.outbox_delete_on_success else OPEN_ENTRY_SUCCEEDED
        try:
            recorded = await self.pool.fetchval(statement, input.outbox_id, json.dumps(result))
        except Exception as error:
            activity.logger.warning("outbox entry %s: handled, not yet recorded (%s); the delivery records it",
                                    input.outbox_id, type(error).__name__)
            return EntryResult(result=result)
        if recorded is None:  # no longer `sending`: its run's own step (if the run is open) records it
            return EntryResult(result=result)
        self._count("succeeded")
        return EntryResult(result=result, completed=True)

    @activity.defn
    async def complete_entry(self, input: CompleteEntryInput) -> None:
        """The entry handled: its ledger line and state written (see `_complete`)."""
        await self._complete(input.outbox_id, input.result)

    async def _complete(self, outbox_id: str, result: dict[str, Any]) -> None:
        """Ledger first, then the outbox row: succeeded, or deleted (completed if the delete fails).

        Kept rows: the ledger line and the row's state in one statement, so both commit or neither.
        """
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
        self._count("aborted")

    def _count(self, outcome: str) -> None:
        self.metrics.counter("pressroom_outbox_processed", "Outbox entries by outcome").add(1, {"outcome": outcome})

    # --- handlers ---

    async def _noop(self, event: BaseModel, key: str, input: EntryInput) -> dict[str, Any]:
        return {}

    async def _welcome_member(self, event: MemberCreatedEvent, key: str, input: EntryInput) -> dict[str, Any]:
        """The welcome email of the automated email for the member's status; once per member.

        Its row in automated_email_recipients records each send's outcome before the request goes
        out; an uncertain one is looked up by its `pressroom-outbox` mark, on any attempt and after
        a requeue, before it is sent again.
        """
        if not self.settings.welcome_emails:
            # Read when the entry is handled, not only when it was queued: an operator who switches
            # welcome emails off stops the ones already queued too. They are not kept waiting (a
            # welcome that arrives days late, in a burst when the switch comes back, helps nobody);
            # they are aborted with this reason, and `pressroom outbox requeue` sends one if wanted.
            raise non_retryable("WELCOME_EMAILS_OFF",
                                "welcome emails are switched off (PRESSROOM_WELCOME_EMAILS=false) "
                                "on the worker that handled this entry; requeue it to send it")
        member = await self.pool.fetchrow("SELECT id, uuid, email, name, status FROM members WHERE id = $1",
                                          event.member_id)
        if member is None:
            return {"skipped": f"member {event.member_id} was deleted before the welcome email"}
        welcome = await self._welcome_email(member)
        if welcome is None:
            return {"skipped": f"no active welcome email {WELCOME_EMAIL_SLUGS[member['status']]} "
                               f"for {member['status']} members"}
        sent = await self.pool.fetchrow(
            "SELECT provider_id, send_outcome, send_attempts, first_uncertain_at, now() AS now, "
            "extract(epoch FROM now() - last_uncertain_at)::float8 AS uncertain_for "
            "FROM automated_email_recipients WHERE automated_email_id = $1 AND member_id = $2",
            welcome["id"], member["id"])
        if sent is not None and sent["provider_id"] is not None:
            return {"provider_id": sent["provider_id"], "already_sent": True}
        message = self._welcome_message(welcome)
        message_id = self.provider.message_id(f"welcome-{hashlib.sha256(key.encode()).hexdigest()[:24]}")
        confirmed = await self._confirm_welcome(member, welcome, sent, message_id, key, input)
        if confirmed is not None:
            return confirmed
        await self._record_welcome(welcome["id"], member, UNCERTAIN, sending=True)  # until the answer says
        try:
            provider_id = await self._send_welcome(member, welcome, message, message_id, key)
        except ProviderError as error:
            await self._record_welcome(welcome["id"], member, error.outcome)
            raise
        await self._record_welcome(welcome["id"], member, ACCEPTED, provider_id=provider_id)
        return {"provider_id": provider_id}

    async def _welcome_email(self, member) -> asyncpg.Record | None:
        """The active automated email for the member's status (comped members get the paid one)."""
        slug = WELCOME_EMAIL_SLUGS[member["status"]]
        if slug != f"member-welcome-email-{member['status']}":
            activity.logger.info("no welcome email of their own for %s members: sending them %s",
                                 member["status"], slug)
        welcome = await self.pool.fetchrow(
            "SELECT id, subject, html, plaintext, sender_name, sender_email, sender_reply_to FROM automated_emails "
            "WHERE slug = $1 AND status = 'active'", slug)
        if welcome is None:
            activity.logger.warning("no active %s: member %s gets no welcome email", slug, member["id"])
        return welcome

    async def _confirm_welcome(self, member, welcome, sent, message_id: str, key: str,
                               input: EntryInput) -> dict[str, Any] | None:
        """An earlier send that may have been accepted is looked up first: found, it is recorded and
        the entry's result returned; not visible yet, the delivery waits (StillConfirming) or, out
        of attempts, fails. None: send it."""
        # A delivery begun by 0.1.0 recorded nothing before sending: its retries look up as it did.
        begun_by_0_1_0 = sent is None and activity.info().attempt > 1
        if not (begun_by_0_1_0 or (sent is not None and sent["send_outcome"] == UNCERTAIN)):
            return None
        begin, end = lookup_window(sent["first_uncertain_at"] if sent else
                                   datetime.now(timezone.utc) - timedelta(days=3),
                                   sent["now"] if sent else datetime.now(timezone.utc))
        provider_id = await self.provider.find_accepted(recipient=member["email"], mark={OUTBOX_MARK: key},
                                                        begin=begin, end=end, message_id=message_id)
        if provider_id is not None:  # an earlier attempt's send was accepted: record it, do not resend
            await self._record_welcome(welcome["id"], member, ACCEPTED, provider_id=provider_id)
            return {"provider_id": provider_id, "confirmed": True}
        if sent is not None:
            wait = confirm_wait(sent["uncertain_for"], self.settings, input.confirm)
            if wait is not None:
                raise StillConfirming(wait)
            if sent["send_attempts"] >= input.max_attempts:
                raise uncertain_sends_exhausted(f"the welcome email of outbox entry {input.outbox_id}",
                                                sent["send_attempts"])
        return None

    async def _record_welcome(self, automated_email_id: str, member, outcome: str, *, provider_id: str | None = None,
                              sending: bool = False) -> None:
        """The outcome of the latest send; an uncertain one keeps the window's start and restarts its wait."""
        await self.pool.execute(
            """INSERT INTO automated_email_recipients AS r (automated_email_id, member_id, member_uuid, member_email,
                      member_name, provider_id, send_outcome, send_attempts, first_uncertain_at, last_uncertain_at)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8::int, CASE WHEN $7 = 'uncertain' THEN now() END,
                       CASE WHEN $7 = 'uncertain' THEN now() END)
               ON CONFLICT (automated_email_id, member_id) DO UPDATE SET
                   provider_id = coalesce(EXCLUDED.provider_id, r.provider_id), send_outcome = $7,
                   send_attempts = r.send_attempts + $8::int,
                   first_uncertain_at = CASE WHEN $7 <> 'uncertain' THEN r.first_uncertain_at
                                             WHEN r.send_outcome = 'uncertain' THEN r.first_uncertain_at
                                             ELSE now() END,
                   last_uncertain_at = CASE WHEN $7 = 'uncertain' THEN now() ELSE r.last_uncertain_at END""",
            automated_email_id, member["id"], member["uuid"], member["email"], member["name"], provider_id, outcome,
            1 if sending else 0)

    def _welcome_message(self, welcome) -> WelcomeMessage:
        """The automated email as sent: its replacements through the newsletter's renderer (a member's
        name is escaped in its HTML), its subject and sender checked as headers; refused otherwise."""
        try:
            rendered = render_automated(welcome["id"], welcome["subject"], welcome["html"],
                                        welcome["plaintext"] or welcome["subject"])
            sender = mailbox(None, welcome["sender_email"], "sender", welcome["id"]) if welcome["sender_email"] \
                else self.settings.from_address
            from_address = mailbox(welcome["sender_name"], sender, "sender", welcome["id"]) \
                if welcome["sender_name"] and welcome["sender_email"] else sender
            reply_to = mailbox(None, welcome["sender_reply_to"], "reply-to", welcome["id"]) \
                if welcome["sender_reply_to"] else None
            header_text(rendered.subject, "subject", welcome["id"])
        except ContentError as error:
            raise non_retryable("WELCOME_CONTENT", f"the automated {error}; fix it and requeue the entry") from None
        return WelcomeMessage(rendered, from_address, reply_to)

    async def _send_welcome(self, member, welcome, message: WelcomeMessage, message_id: str, key: str) -> str:
        rendered = message.rendered
        values = member_values(name=member["name"], email=member["email"], uuid=str(member["uuid"]),
                               status=member["status"], site_url=self.settings.site_url, email_id=welcome["id"])
        prepared = self.provider.prepare(Message(
            from_address=message.from_address, subject=rendered.subject, html=rendered.html, text=rendered.text,
            tags=["welcome-email"], headers={"Reply-To": message.reply_to} if message.reply_to else {}))
        return await self.provider.send(prepared, {member["email"]: rendered.recipient_variables(values)},
                                        mark={"automated-email-id": welcome["id"], OUTBOX_MARK: key},
                                        message_id=message_id)


# --- entries whose delivery run closed without finishing them (the watchdog's outbox job) ---------

async def _unfinished_entries(pool, older_than: float, after, limit: int) -> list[Watched]:
    """Entries `sending`, or `failed` in a retry's backoff, unchanged for `older_than` seconds (a
    delivery that just started is running), oldest first after `after`."""
    rows = await pool.fetch(
        "SELECT id, idempotency_key, status, updated_at FROM outbox WHERE status IN ('sending', 'failed') "
        "AND updated_at < now() - make_interval(secs => $1) "
        "AND ($2::timestamptz IS NULL OR (updated_at, id) > ($2, $3)) ORDER BY updated_at, id LIMIT $4",
        older_than, after[0] if after else None, after[1] if after else "", limit)
    return [Watched(row, outbox_workflow_id(row["idempotency_key"])) for row in rows]


async def _abort_unfinished_entry(pool, watched: Watched, closed: ClosedRun) -> str | None:
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

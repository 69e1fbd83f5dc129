"""Sending a batch: one provider call for its recipients, its outcome recorded.

Safe to repeat: a submitted batch is never sent again, and a batch whose last send was uncertain
(see activities/confirm.py) is looked up in the provider's events by its own batch mark before
anything is resent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime

import asyncpg
from temporalio import activity

from activities.confirm import confirm_wait, lookup_window, uncertain_sends_exhausted
from activities.errors import non_retryable
from activities.heartbeat import FIRST_HEARTBEAT_SECONDS, heartbeating
from activities.newsletter.batch_outcome import NOT_FOUND, answered, record_submitted, take_hold
from activities.newsletter.content import Messages
from activities.newsletter.failures import BATCH_NOT_FOUND, PROVIDER_UNAVAILABLE, UnavailableDetails, send_failure
from activities.newsletter.lock import unpublished
from activities.newsletter.models import (
    BatchesSent,
    BatchSent,
    FailBatchInput,
    ListUnsentBatchesInput,
    SendBatchesInput,
    SendBatchInput,
)
from activities.provider_errors import send_failure_of
from activities.sending_limits import sending_domain
from pressroom.dependencies import Dependencies
from pressroom.email_rendering import MemberValues, Rendered
from pressroom.logs import mask
from pressroom.providers.port import (
    BATCH_MARK,
    EMAIL_MARK,
    NOT_ACCEPTED,
    UNCERTAIN,
    EmailProvider,
    ProviderError,
    SendResult,
)

# Claims a batch not yet submitted ($1) whose post is still published (or has none) and returns its
# recipients in order. Unless the last send
# was uncertain, the same statement records this attempt as one (as `_record_outcome` would with
# sending=True); the returned send_outcome is the one before this attempt.
CLAIM_BATCH = """
    WITH old AS (SELECT b.id, b.status, b.send_outcome, p.status AS post_status
                 FROM email_batches b JOIN emails e ON e.id = b.email_id LEFT JOIN posts p ON p.id = e.post_id
                 WHERE b.id = $1 FOR UPDATE OF b),
    claimed AS (
        UPDATE email_batches b
        SET status = 'submitting', updated_at = now(),
            send_outcome = 'uncertain',
            send_attempts = b.send_attempts + CASE WHEN old.send_outcome = 'uncertain' THEN 0 ELSE 1 END,
            first_uncertain_at = CASE WHEN old.send_outcome = 'uncertain' THEN b.first_uncertain_at ELSE now() END,
            last_uncertain_at = CASE WHEN old.send_outcome = 'uncertain' THEN b.last_uncertain_at ELSE now() END
        FROM old WHERE b.id = old.id AND old.status <> 'submitted'
          AND coalesce(old.post_status, 'published') IN ('published', 'sent')
        RETURNING b.id, b.email_id, b.member_segment, b.fallback_sending_domain, old.send_outcome, b.send_attempts,
                  b.requeue_generation, b.first_uncertain_at, now() AS now,
                  extract(epoch FROM now() - b.last_uncertain_at)::float8 AS uncertain_for)
    SELECT claimed.*, r.emails, r.names, r.uuids,
           (SELECT n.uuid::text FROM emails e JOIN newsletters n ON n.id = e.newsletter_id
            WHERE e.id = claimed.email_id) AS newsletter_uuid
    FROM claimed, LATERAL (
        SELECT array_agg(r.member_email ORDER BY r.id) AS emails, array_agg(r.member_name ORDER BY r.id) AS names,
               array_agg(r.member_uuid::text ORDER BY r.id) AS uuids
        FROM email_recipients r WHERE r.batch_id = claimed.id) r
"""
# Each recipient's member status, in the claim's order: read only for a body whose placeholders show
# it, so that a claim reads no member row (a member deleted since reads as '').
BATCH_STATUSES = """
    SELECT array_agg(coalesce(m.status, '') ORDER BY r.id)
    FROM email_recipients r LEFT JOIN members m ON m.id = r.member_id WHERE r.batch_id = $1
"""
# A requeued batch still holding its wait: `send_batch` takes the wait, so a group leaves it alone.
HELD_BATCHES = ("SELECT id FROM email_batches WHERE id = ANY($1::text[]) AND status = 'pending' "
                "AND hold_seconds IS NOT NULL")

# Recipients the provider refused one by one in an accepted call: each recorded as that
# recipient's failure, in the shape a failed event leaves (activities/delivery_events/apply.py), with
# the provider's reason (no address) and no code. Its event id is the recipient's, so a repeat
# changes nothing, and a failed event that comes later replaces it by the events' own rules.
class BatchSendActivities:
    def __init__(self, deps: Dependencies) -> None:
        self.pool = deps.pool
        self.provider = deps.provider
        self.settings = deps.settings
        # Bodies rendered once per (email, segment) and reused for every batch in this worker.
        self._messages = Messages(deps.pool, deps.settings)

    @activity.defn
    async def list_unsent_batches(self, input: ListUnsentBatchesInput) -> list[str]:
        """The next batch ids still to send (pending, or interrupted mid-send), in order."""
        async with heartbeating(first_after=FIRST_HEARTBEAT_SECONDS):  # watched by the send's heartbeat timeout
            rows = await self.pool.fetch(
                "SELECT id FROM email_batches WHERE email_id = $1 AND status IN ('pending', 'submitting') "
                "ORDER BY id LIMIT $2", input.email_id, input.limit)
        return [row["id"] for row in rows]

    @activity.defn
    async def send_batches(self, input: SendBatchesInput) -> BatchesSent:
        """Several batches at once, each as `send_batch` sends it (its own claim, committed before its
        request goes out); those not settled here are handed back, to be sent on their own.

        Safe to repeat, for the same reasons as `send_batch`: a batch submitted is answered as sent,
        and one whose send was uncertain (a worker killed mid-call) is looked up before any resend.
        """
        async with heartbeating(first_after=FIRST_HEARTBEAT_SECONDS):
            held = {row["id"] for row in await self.pool.fetch(
                HELD_BATCHES, [batch.batch_id for batch in input.batches])}
            results = await asyncio.gather(*(self._send_in_group(batch) for batch in input.batches
                                             if batch.batch_id not in held))
        sent = [result for result in results if result is not None]
        settled = {result.batch_id for result in sent}
        return BatchesSent(sent=sent, alone=[batch.batch_id for batch in input.batches
                                             if batch.batch_id not in settled])

    async def _send_in_group(self, input: SendBatchInput) -> BatchSent | None:
        """The batch sent, or None when it is not settled: whatever stopped it is met again, and
        handled, when it is sent on its own."""
        try:
            sent = await self._send_batch(input)
        except Exception as error:  # noqa: BLE001 (each batch's failure is handled on its own send)
            activity.logger.info("batch %s not settled in its group (%s): sent on its own", input.batch_id,
                                 type(error).__name__)
            return None
        return sent if sent.confirm_in_seconds is None else None

    @activity.defn
    async def send_batch(self, input: SendBatchInput) -> BatchSent:
        """One provider message for the batch's recipients.

        Safe to repeat: a submitted batch is not sent again, and a batch whose last send was
        uncertain is first looked up in the provider's events; while it may still appear there,
        nothing is sent and the workflow is told when to look again.
        """
        # A send is usually answered within the first wait: it then costs the server no heartbeat request.
        async with heartbeating(first_after=FIRST_HEARTBEAT_SECONDS):
            return await self._send_batch(input)

    async def _send_batch(self, input: SendBatchInput) -> BatchSent:
        # One statement claims the batch, reads its recipients and, unless its last send was
        # uncertain (then it is looked up first), records this attempt as uncertain: committed
        # before the request goes out, so a worker killed mid-send leaves "uncertain" behind.
        self.settings.require_members_link_secret()  # before the claim: nothing is marked when it is missing
        await take_hold(self.pool, input.batch_id)
        batch = await self.pool.fetchrow(CLAIM_BATCH, input.batch_id)
        if batch is None:
            return await self._not_claimed(input.batch_id)
        # The batch's domain decides where it is sent from, the From address and where its events are.
        provider = self.provider.for_scope(sending_domain(self.settings, batch["fallback_sending_domain"]))
        message_id = provider.message_id(input.batch_id)
        try:
            body, message = await self._messages.get(batch["email_id"], batch["member_segment"], provider,
                                                     fallback=provider.scope != self.provider.scope)
        except Exception:
            if batch["send_outcome"] != UNCERTAIN:  # marked by the claim, yet nothing went out
                await self._record_outcome(input.batch_id, NOT_ACCEPTED)
            raise
        if batch["send_outcome"] == UNCERTAIN:
            settled = await self._confirm_uncertain(input, batch, provider, message_id)
            if settled is not None:
                return settled
        statuses = await self.pool.fetchval(BATCH_STATUSES, input.batch_id) if body.shows("status") else None
        recipients = self._personalised(batch, body, statuses)
        if not recipients:  # every member of it was deleted since it was written; a provider refuses an empty message
            activity.logger.info("batch %s has no recipient left: closed without a send", input.batch_id)
            await record_submitted(self.pool, input.batch_id, "")
            return BatchSent(batch_id=input.batch_id, recipients=0, provider_id="", reconciled=False)
        activity.logger.info("sending batch %s (%d recipients)", input.batch_id, len(recipients))
        try:
            sent = await provider.send(message, recipients,
                                       mark={EMAIL_MARK: batch["email_id"], BATCH_MARK: input.batch_id},
                                       message_id=message_id, delivery_time=input.delivery_time)
        except ProviderError as error:
            answer = answered(error, batch["requeue_generation"])
            if answer is None:
                await self._record_outcome(input.batch_id, error.outcome, answer=error)
                raise send_failure_of(error, len(recipients)) from None
            sent = answer
        requeued = await record_submitted(self.pool, input.batch_id, sent, batch["requeue_generation"])
        return BatchSent(batch_id=input.batch_id, recipients=len(recipients) - requeued, provider_id=sent.provider_id,
                         reconciled=False, requeued=1 if requeued else 0)

    async def _not_claimed(self, batch_id: str) -> BatchSent:
        """A batch the claim did not take: submitted already (answered as sent), its post no longer
        published, or no such batch."""
        done = await self.pool.fetchrow(
            "SELECT b.status, b.provider_id, e.post_id, p.status AS post_status, "
            "(SELECT count(*) FROM email_recipients WHERE batch_id = $1) AS n FROM email_batches b "
            "JOIN emails e ON e.id = b.email_id LEFT JOIN posts p ON p.id = e.post_id WHERE b.id = $1",
            batch_id)
        if done is None:
            raise non_retryable(BATCH_NOT_FOUND, f"batch {batch_id} does not exist")
        if done["status"] != "submitted":  # not claimed: its post is no longer published
            raise non_retryable("PostNotPublished", f"batch {batch_id} is not sent: "
                                f"{unpublished(done['post_id'], done['post_status'])}")
        # An attempt whose answer the workflow never heard may have requeued some recipients.
        requeued = await self.pool.fetchval("SELECT count(*) FROM email_batches WHERE requeued_from = $1", batch_id)
        return BatchSent(batch_id=batch_id, recipients=done["n"], provider_id=done["provider_id"], reconciled=True,
                         requeued=requeued)

    async def _confirm_uncertain(self, input: SendBatchInput, batch: asyncpg.Record, provider: EmailProvider,
                                 message_id: str) -> BatchSent | None:
        """A batch whose last send was uncertain: found in the provider's events (sent), not there yet
        (look again later), or None: send it once more, this attempt recorded as uncertain."""
        recipients = len(batch["emails"] or [])
        window = lookup_window(batch["first_uncertain_at"], batch["now"])
        found = await self._find_accepted_each(provider, input.batch_id, batch["emails"] or [], *window)
        if found:  # a provider that answers each recipient apart took the call, for these at least
            return await self._confirm_each(input, batch, found)
        provider_id = None if found is not None else \
            await self._find_accepted(provider, input.batch_id, batch["emails"][0], message_id, *window)
        if provider_id is not None:
            activity.logger.info("batch %s was accepted by an earlier attempt; not sending it again", input.batch_id)
            await record_submitted(self.pool, input.batch_id, provider_id)
            return BatchSent(batch_id=input.batch_id, recipients=recipients, provider_id=provider_id,
                             reconciled=True)
        wait = confirm_wait(batch["uncertain_for"], self.settings, input.may_wait_to_confirm)
        if wait is not None:
            activity.logger.info("batch %s may have been accepted and is not in the provider's events yet; "
                                 "looking again in %.0f s", input.batch_id, wait)
            return BatchSent(batch_id=input.batch_id, recipients=recipients, provider_id="",
                             reconciled=False, confirm_in_seconds=wait)
        if batch["send_attempts"] >= self.settings.provider_retries + 1:
            raise uncertain_sends_exhausted(f"batch {input.batch_id}", batch["send_attempts"])
        await self._record_outcome(input.batch_id, UNCERTAIN, sending=True)  # until the answer says otherwise
        return None

    async def _confirm_each(self, input: SendBatchInput, batch: asyncpg.Record, found: Mapping[str, str]) -> BatchSent:
        """An uncertain call some of whose recipients' acceptances were received (SES): the others'
        may still come until the confirm window has passed; after it, those not found were refused
        (for the moment, as far as anyone can tell: SES emits nothing for a refused destination) and
        are sent again in a new batch, as an answer naming them would have had them."""
        emails = batch["emails"] or []
        missing = [address for address in emails if address not in found]
        provider_id = next(iter(found.values()))
        if missing:
            wait = confirm_wait(batch["uncertain_for"], self.settings, input.may_wait_to_confirm)
            if wait is not None:
                activity.logger.info("batch %s was accepted by an earlier attempt; %d of its %d recipients are not "
                                     "in the received events yet: looking again in %.0f s", input.batch_id,
                                     len(missing), len(emails), wait)
                return BatchSent(batch_id=input.batch_id, recipients=len(emails), provider_id="",
                                 reconciled=False, confirm_in_seconds=wait)
        activity.logger.info("batch %s was accepted by an earlier attempt; not sending it again (%d of its %d "
                             "recipients not accepted)", input.batch_id, len(missing), len(emails))
        sent = SendResult(provider_id, dict(found), {address: NOT_FOUND for address in missing},
                          frozenset(missing), retry_after=1.0)
        requeued = await record_submitted(self.pool, input.batch_id, sent, batch["requeue_generation"])
        return BatchSent(batch_id=input.batch_id, recipients=len(emails) - requeued, provider_id=provider_id,
                         reconciled=True, requeued=1 if requeued else 0)

    async def _find_accepted_each(self, provider: EmailProvider, batch_id: str, emails: list[str],
                                  begin: datetime, end: datetime) -> Mapping[str, str] | None:
        try:
            return await provider.find_accepted_each(recipients=emails, mark={BATCH_MARK: batch_id},
                                                     begin=begin, end=end)
        except ProviderError as error:
            raise send_failure(PROVIDER_UNAVAILABLE, f"cannot check whether batch {batch_id} was accepted: {error}",
                               UnavailableDetails(outage=True)) from None

    def _personalised(self, batch: asyncpg.Record, body: Rendered, statuses: list[str] | None) -> dict[str, dict]:
        """Each reader's values by address, resolved here so that no address enters a workflow history."""
        values = MemberValues(site_url=self.settings.site_url, link_secret=self.settings.require_members_link_secret(),
                              newsletter_uuid=batch["newsletter_uuid"], email_id=batch["email_id"])
        variables = body.recipient_variables
        emails = batch["emails"] or []
        return {
            address: variables(values(name=name, email=address, uuid=uuid, status=status))
            for address, name, uuid, status in zip(emails, batch["names"] or [], batch["uuids"] or [],
                                                   statuses or [""] * len(emails), strict=True)}

    async def _find_accepted(self, provider: EmailProvider, batch_id: str, first_recipient: str, message_id: str,
                             begin: datetime, end: datetime) -> str | None:
        try:
            return await provider.find_accepted(recipient=first_recipient, mark={BATCH_MARK: batch_id},
                                                begin=begin, end=end, message_id=message_id)
        except ProviderError as error:
            # The events cannot be read: nothing is sent until they can, and that is an outage.
            raise send_failure(PROVIDER_UNAVAILABLE, f"cannot check whether batch {batch_id} was accepted: {error}",
                               UnavailableDetails(outage=True)) from None

    async def _record_outcome(self, batch_id: str, outcome: str, *, sending: bool = False,
                              answer: ProviderError | None = None) -> None:
        """The outcome of the latest attempt; an uncertain one keeps the window's start and restarts its
        wait. With the provider's `answer` to it, its status and message (no address) are kept on the
        batch, as the reference keeps them: when the tries run out they say why (`fail_batch`)."""
        await self.pool.execute(
            """UPDATE email_batches SET send_outcome = $2, send_attempts = send_attempts + $3::int,
                      first_uncertain_at = CASE WHEN $2 <> 'uncertain' THEN NULL
                                                WHEN send_outcome = 'uncertain' THEN first_uncertain_at
                                                ELSE now() END,
                      last_uncertain_at = CASE WHEN $2 = 'uncertain' THEN now() END,
                      error_status_code = CASE WHEN $4 THEN $5 ELSE error_status_code END,
                      error_message = CASE WHEN $4 THEN $6 ELSE error_message END, updated_at = now()
               WHERE id = $1""", batch_id, outcome, 1 if sending else 0, answer is not None,
            answer.status_code if answer else None, mask(str(answer))[:2000] if answer else None)

    @activity.defn
    async def fail_batch(self, input: FailBatchInput) -> None:
        """Record why a batch failed; its recipients were processed (tried) all the same."""
        async with heartbeating(first_after=FIRST_HEARTBEAT_SECONDS), self.pool.acquire() as conn, conn.transaction():
            # The provider's last answer to the batch (`_record_outcome`) stays its status and
            # message; why the tries stopped is kept beside it, in error_data.
            await conn.execute(
                "UPDATE email_batches SET status = 'failed', error_status_code = coalesce($2, error_status_code), "
                "error_message = coalesce(error_message, $3), "
                "error_data = jsonb_build_object('message', $3::text), updated_at = now() "
                "WHERE id = $1 AND status <> 'submitted'", input.batch_id, input.status_code, input.message[:2000])
            await conn.execute("UPDATE email_recipients SET processed_at = now() WHERE batch_id = $1", input.batch_id)

"""Sending a batch: one provider call for its recipients, its outcome recorded.

Safe to repeat: a submitted batch is never sent again, and a batch whose last send was uncertain
(see activities/confirm.py) is looked up in the provider's events by its own batch mark before
anything is resent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from temporalio import activity

from activities.confirm import confirm_wait, lookup_window, uncertain_sends_exhausted
from activities.errors import non_retryable
from activities.heartbeat import FIRST_HEARTBEAT_SECONDS, heartbeating
from activities.newsletter.content import Messages
from activities.newsletter.lock import unpublished
from activities.newsletter.failures import (BATCH_NOT_FOUND, PROVIDER_UNAVAILABLE, SENDING_LIMIT_REACHED,
                                            SendingLimitDetails, UnavailableDetails, send_failure)
from activities.newsletter.models import BatchSent, FailBatchInput, ListUnsentBatchesInput, SendBatchInput
from activities.provider_errors import send_failure_of
from activities.sending_limits import sending_domain
from pressroom.dependencies import Dependencies
from pressroom.email_rendering import MemberValues, Rendered
from pressroom.providers.port import (ACCEPTED, BATCH_MARK, EMAIL_MARK, NOT_ACCEPTED, UNCERTAIN, EmailProvider,
                                     ProviderError, ProviderRejected, SendResult)

# Recipients refused for the moment are sent again in a new batch at most this many times (each a
# generation of the first), then recorded as failed with the provider's reason: a destination the
# provider always refuses cannot keep an email sending forever.
REQUEUE_LIMIT = 5
# Each generation waits this many times longer than the one before, from the provider's own wait
# (SES: 1 s, 1, 4, 16, 64, 256 s): a throttled account has minutes to recover before anyone fails.
REQUEUE_BACKOFF = 4
REQUEUE_HOLD_MAX = 86_400.0  # a day: SES's rolling quota has turned over by then
# Why a recipient of a call whose answer was lost is sent again: the others' acceptances came, its did not.
NOT_FOUND = "not accepted: no acceptance received for it within the confirm window"

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
    SELECT claimed.*, r.emails, r.names, r.uuids, r.statuses,
           (SELECT n.uuid::text FROM emails e JOIN newsletters n ON n.id = e.newsletter_id
            WHERE e.id = claimed.email_id) AS newsletter_uuid
    FROM claimed, LATERAL (
        SELECT array_agg(r.member_email ORDER BY r.id) AS emails, array_agg(r.member_name ORDER BY r.id) AS names,
               array_agg(r.member_uuid::text ORDER BY r.id) AS uuids,
               array_agg(coalesce(m.status, '') ORDER BY r.id) AS statuses
        FROM email_recipients r LEFT JOIN members m ON m.id = r.member_id WHERE r.batch_id = claimed.id) r
"""

# Recipients the provider refused one by one in an accepted call: each recorded as that
# recipient's failure, in the shape a failed event leaves (activities/delivery_events/apply.py), with
# the provider's reason (no address) and no code. Its event id is the recipient's, so a repeat
# changes nothing, and a failed event that comes later replaces it by the events' own rules.
RECORD_SUBMITTED = """
WITH batch AS (
    UPDATE email_batches SET status = 'submitted', provider_id = $2, send_outcome = $3,
           error_status_code = NULL, error_message = NULL, error_data = NULL, updated_at = now()
    WHERE id = $1)
UPDATE email_recipients SET processed_at = now() WHERE batch_id = $1"""

# Recipients of $1 refused for the moment move to a new pending batch $2 of the same email, one
# generation on, to wait $4 seconds before it is sent; a repeat finds it written and moves nothing.
REQUEUE = """
WITH batch AS (
    INSERT INTO email_batches (id, email_id, member_segment, fallback_sending_domain, requeued_from,
                               requeue_generation, hold_seconds)
    SELECT $2, email_id, member_segment, fallback_sending_domain, id, requeue_generation + 1, $4
    FROM email_batches WHERE id = $1
    ON CONFLICT (id) DO NOTHING RETURNING id)
UPDATE email_recipients r SET batch_id = batch.id FROM batch
WHERE r.batch_id = $1 AND r.member_email = ANY($3::text[])"""

# A requeued batch's wait, taken once: cleared as it is read, so the send after the wait goes.
TAKE_HOLD = """
WITH old AS (SELECT id, hold_seconds FROM email_batches
             WHERE id = $1 AND status = 'pending' AND hold_seconds IS NOT NULL FOR UPDATE)
UPDATE email_batches b SET hold_seconds = NULL, updated_at = now() FROM old WHERE b.id = old.id
RETURNING old.hold_seconds"""

RECORD_REFUSED = """
    INSERT INTO email_recipient_failures (email_id, member_id, email_recipient_id, code, enhanced_code, message,
                                          severity, failed_at, event_id)
    SELECT er.email_id, er.member_id, er.id, 0, NULL, t.reason, t.severity, now(), 'refused-at-send:' || er.id
    FROM unnest($2::text[], $3::text[], $4::text[]) AS t(address, reason, severity)
    JOIN email_recipients er ON er.batch_id = $1 AND er.member_email = t.address
    ON CONFLICT (email_recipient_id) DO NOTHING
"""


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
        rows = await self.pool.fetch(
            "SELECT id FROM email_batches WHERE email_id = $1 AND status IN ('pending', 'submitting') "
            "ORDER BY id LIMIT $2", input.email_id, input.limit)
        return [row["id"] for row in rows]

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
        await self._take_hold(input.batch_id)
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
        recipients = self._personalised(batch, body)
        if not recipients:  # every member of it was deleted since it was written; a provider refuses an empty message
            activity.logger.info("batch %s has no recipient left: closed without a send", input.batch_id)
            await self._record_submitted(input.batch_id, "")
            return BatchSent(batch_id=input.batch_id, recipients=0, provider_id="", reconciled=False)
        activity.logger.info("sending batch %s (%d recipients)", input.batch_id, len(recipients))
        try:
            sent = await provider.send(message, recipients,
                                       mark={EMAIL_MARK: batch["email_id"], BATCH_MARK: input.batch_id},
                                       message_id=message_id, delivery_time=input.delivery_time)
        except ProviderError as error:
            sent = self._answered(error, batch["requeue_generation"])
            if sent is None:
                await self._record_outcome(input.batch_id, error.outcome)
                raise send_failure_of(error, len(recipients)) from None
        requeued = await self._record_submitted(input.batch_id, sent, batch["requeue_generation"])
        return BatchSent(batch_id=input.batch_id, recipients=len(recipients) - requeued, provider_id=sent.provider_id,
                         reconciled=False, requeued=1 if requeued else 0)

    @staticmethod
    def _answered(error: ProviderError, generation: int) -> SendResult | None:
        """A call the provider answered recipient by recipient and took none of, read as an answer
        rather than a failure when some were refused for the moment and either others for good (the
        batch is not failed whole for them) or the batch is itself a requeue (its generations are
        counted, so a destination always refused ends); otherwise None: the batch is retried whole."""
        answered = error.answered
        if answered is None or not answered.refused_temporarily:
            return None
        return answered if generation > 0 or isinstance(error, ProviderRejected) else None

    async def _take_hold(self, batch_id: str) -> None:
        """A requeued batch waits first for as long as the provider asked, on the workflow's timer:
        the failure that names a provider's sending limit carries the wait (once; then it is sent)."""
        hold = await self.pool.fetchval(TAKE_HOLD, batch_id)
        if hold is not None:
            raise send_failure(SENDING_LIMIT_REACHED, f"batch {batch_id} holds recipients the provider refused for "
                               f"the moment; sent again in {hold:.0f} s", SendingLimitDetails(retry_after_seconds=hold),
                               non_retryable=True)

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

    async def _confirm_uncertain(self, input: SendBatchInput, batch, provider: EmailProvider,
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
            await self._record_submitted(input.batch_id, provider_id)
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

    async def _confirm_each(self, input: SendBatchInput, batch, found: Mapping[str, str]) -> BatchSent:
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
        requeued = await self._record_submitted(input.batch_id, sent, batch["requeue_generation"])
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

    def _personalised(self, batch, body: Rendered) -> dict[str, dict]:
        """Each reader's values by address, resolved here so that no address enters a workflow history."""
        values = MemberValues(site_url=self.settings.site_url, link_secret=self.settings.require_members_link_secret(),
                              newsletter_uuid=batch["newsletter_uuid"], email_id=batch["email_id"])
        variables = body.recipient_variables
        return {
            address: variables(values(name=name, email=address, uuid=uuid, status=status))
            for address, name, uuid, status in zip(batch["emails"] or [], batch["names"] or [],
                                                   batch["uuids"] or [], batch["statuses"] or [])}

    async def _find_accepted(self, provider: EmailProvider, batch_id: str, first_recipient: str, message_id: str,
                             begin: datetime, end: datetime) -> str | None:
        try:
            return await provider.find_accepted(recipient=first_recipient, mark={BATCH_MARK: batch_id},
                                                begin=begin, end=end, message_id=message_id)
        except ProviderError as error:
            # The events cannot be read: nothing is sent until they can, and that is an outage.
            raise send_failure(PROVIDER_UNAVAILABLE, f"cannot check whether batch {batch_id} was accepted: {error}",
                               UnavailableDetails(outage=True)) from None

    async def _record_outcome(self, batch_id: str, outcome: str, *, sending: bool = False) -> None:
        """The outcome of the latest attempt; an uncertain one keeps the window's start and restarts its wait."""
        await self.pool.execute(
            """UPDATE email_batches SET send_outcome = $2, send_attempts = send_attempts + $3::int,
                      first_uncertain_at = CASE WHEN $2 <> 'uncertain' THEN NULL
                                                WHEN send_outcome = 'uncertain' THEN first_uncertain_at
                                                ELSE now() END,
                      last_uncertain_at = CASE WHEN $2 = 'uncertain' THEN now() END, updated_at = now()
               WHERE id = $1""", batch_id, outcome, 1 if sending else 0)

    async def _record_submitted(self, batch_id: str, sent: SendResult | str, generation: int = 0) -> int:
        """The batch submitted with what the provider said of each recipient, in one transaction:
        those refused for good recorded as their failures; those refused for the moment moved to a
        new batch of the same email (until REQUEUE_LIMIT generations, then recorded as failures too).
        The number of recipients moved."""
        if isinstance(sent, str) or not sent.refused:  # one statement is its own transaction
            await self.pool.execute(RECORD_SUBMITTED, batch_id, sent if isinstance(sent, str) else sent.provider_id,
                                    ACCEPTED)
            return 0
        refused, temporarily = dict(sent.refused), sent.refused_temporarily
        moved: list[str] = []
        if temporarily and generation < REQUEUE_LIMIT:
            moved = [address for address in refused if address in temporarily]
            for address in moved:
                del refused[address]
        elif temporarily:
            refused = {address: reason if address not in temporarily else
                       f"{reason}; sent again {REQUEUE_LIMIT} times" for address, reason in refused.items()}
        async with self.pool.acquire() as conn, conn.transaction():
            if moved:
                hold = min((sent.retry_after or 1.0) * REQUEUE_BACKOFF ** generation, REQUEUE_HOLD_MAX)
                await conn.execute(REQUEUE, batch_id, requeued_batch_id(batch_id, generation + 1), moved, hold)
            await conn.execute(RECORD_SUBMITTED, batch_id, sent.provider_id, ACCEPTED)
            if refused:
                addresses = list(refused)
                await conn.execute(RECORD_REFUSED, batch_id, addresses, [refused[a] for a in addresses],
                                   ["temporary" if a in temporarily else "permanent" for a in addresses])
        # Counts only: no address in a log.
        activity.logger.warning("batch %s: the provider refused %d of its recipients; %d recorded as their failures, "
                                "%d to be sent again in a new batch", batch_id, len(sent.refused), len(refused),
                                len(moved))
        return len(moved)

    @activity.defn
    async def fail_batch(self, input: FailBatchInput) -> None:
        """Record why a batch failed; its recipients were processed (tried) all the same."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "UPDATE email_batches SET status = 'failed', error_status_code = $2, error_message = $3, "
                "error_data = jsonb_build_object('message', $3::text), updated_at = now() "
                "WHERE id = $1 AND status <> 'submitted'", input.batch_id, input.status_code, input.message[:2000])
            await conn.execute("UPDATE email_recipients SET processed_at = now() WHERE batch_id = $1", input.batch_id)



def requeued_batch_id(batch_id: str, generation: int) -> str:
    """The batch that sends again what `batch_id` could not send now: the first batch's id and its
    generation ("…-00003.r2"), so a repeat names the same batch and ids sort beside their first."""
    return f"{re.sub(r'[.]r[0-9]+$', '', batch_id)}.r{generation}"

"""A provider's answer to a batch, recorded: the batch submitted, those it refused for good as
their failures, and those it refused for the moment (SES answers each destination apart) moved to
a new batch of the same email, sent again after a wait, a few times at most."""

from __future__ import annotations

import re

import asyncpg
from temporalio import activity

from activities.newsletter.failures import SENDING_LIMIT_REACHED, SendingLimitDetails, send_failure
from pressroom.providers.port import ACCEPTED, ProviderError, ProviderRejected, SendResult

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


def answered(error: ProviderError, generation: int) -> SendResult | None:
    """A call the provider answered recipient by recipient and took none of, read as an answer
    rather than a failure when some were refused for the moment and either others for good (the
    batch is not failed whole for them) or the batch is itself a requeue (its generations are
    counted, so a destination always refused ends); otherwise None: the batch is retried whole."""
    answered = error.answered
    if answered is None or not answered.refused_temporarily:
        return None
    return answered if generation > 0 or isinstance(error, ProviderRejected) else None


async def take_hold(pool: asyncpg.Pool, batch_id: str) -> None:
    """A requeued batch waits first for as long as the provider asked, on the workflow's timer:
    the failure that names a provider's sending limit carries the wait (once; then it is sent)."""
    hold = await pool.fetchval(TAKE_HOLD, batch_id)
    if hold is not None:
        raise send_failure(SENDING_LIMIT_REACHED, f"batch {batch_id} holds recipients the provider refused for "
                           f"the moment; sent again in {hold:.0f} s", SendingLimitDetails(retry_after_seconds=hold),
                           non_retryable=True)


async def record_submitted(pool: asyncpg.Pool, batch_id: str, sent: SendResult | str, generation: int = 0) -> int:
    """The batch submitted with what the provider said of each recipient, in one transaction:
    those refused for good recorded as their failures; those refused for the moment moved to a
    new batch of the same email (until REQUEUE_LIMIT generations, then recorded as failures too).
    The number of recipients moved."""
    if isinstance(sent, str) or not sent.refused:  # one statement is its own transaction
        await pool.execute(RECORD_SUBMITTED, batch_id, sent if isinstance(sent, str) else sent.provider_id,
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
    async with pool.acquire() as conn, conn.transaction():
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



def requeued_batch_id(batch_id: str, generation: int) -> str:
    """The batch that sends again what `batch_id` could not send now: the first batch's id and its
    generation ("…-00003.r2"), so a repeat names the same batch and ids sort beside their first."""
    return f"{re.sub(r'[.]r[0-9]+$', '', batch_id)}.r{generation}"

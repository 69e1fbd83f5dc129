"""Finishing an email: submitted when every batch is, failed with the reason otherwise; and the
watchdog's job for emails whose send closed without finishing them."""

from __future__ import annotations

import asyncpg
from temporalio import activity

from activities.heartbeat import FIRST_HEARTBEAT_SECONDS, heartbeating
from activities.newsletter.counts import batch_counts
from activities.newsletter.lock import is_run_id, lock_holder, unpublished
from activities.newsletter.models import EmailOutcome, FinishEmailInput
from activities.watchdog import SEND_FAILED, ClosedRun, Job, Watched
from pressroom.dependencies import Dependencies

PARTIALLY_SENT = "The email was only partially sent: {failed} of {total} batches failed. Send it again to retry them."
STOPPED = ("The email was stopped: {why}; {submitted} of {total} batches had been sent and nothing more is. "
           "Publish the post again, then send it to send the rest.")
CANCELLED = ("The email was cancelled by {by} at {at:%Y-%m-%d %H:%M:%S} UTC: {submitted} of {total} batches had been "
             "sent and stay sent; nothing more is.")
NOT_SENT = "The email failed to send: no batch was accepted by {provider}{why}. Send it again to retry."
MAY_HAVE_BEEN_SENT = (" {uncertain} of the failed batches may have reached {provider} all the same: sending again "
                      "looks them up in its events first and sends only those it cannot find.")
# The provider's answer most failed batches kept (their status and message), for NOT_SENT.
_BATCHES_ANSWER = """
SELECT error_status_code, error_message FROM email_batches
WHERE email_id = $1 AND status = 'failed' AND error_message IS NOT NULL
GROUP BY 1, 2 ORDER BY count(*) DESC, 1 LIMIT 1"""


def batches_answer(row: asyncpg.Record | None) -> str:
    """' (401: the provider's message)' from the failed batches' kept answer, or '' without one."""
    if row is None:
        return ""
    code, message = row["error_status_code"], row["error_message"]
    return f" ({code}: {message})" if code is not None and str(code) not in message else f" ({message})"


class EmailFinishActivities:
    def __init__(self, deps: Dependencies) -> None:
        self.pool = deps.pool
        self.provider_title = deps.provider_title

    @activity.defn
    async def finish_email(self, input: FinishEmailInput) -> EmailOutcome:
        """submitted when every batch is; cancelled when an operator stopped it; failed otherwise, the
        message saying how many batches failed. Safe to repeat: it writes what the batches say."""
        async with heartbeating(first_after=FIRST_HEARTBEAT_SECONDS), self.pool.acquire() as conn, conn.transaction():
            counts = await batch_counts(conn, input.email_id)
            # A cancel during a chunked creation leaves recipients with no batch: not all sent.
            written = input.cancelled_by is None or await conn.fetchval(
                "SELECT coalesce(bool_and(done), true) FROM email_batch_creation WHERE email_id = $1", input.email_id)
            # Cancelled before any batch was written (while its lock was retried): not sent, cancelled.
            nothing_written = input.cancelled_by is not None and counts.batches_total == 0
            if counts.batches_submitted == counts.batches_total and written and not nothing_written:
                status, message = "submitted", ""
            elif input.cancelled_by is not None:
                status = "cancelled"
                message = CANCELLED.format(by=input.cancelled_by, at=input.cancelled_at,
                                           submitted=counts.batches_submitted, total=counts.batches_total)
            elif counts.batches_submitted:
                status = "failed"
                message = PARTIALLY_SENT.format(failed=counts.batches_total - counts.batches_submitted,
                                                total=counts.batches_total)
            else:
                why = batches_answer(await conn.fetchrow(_BATCHES_ANSWER, input.email_id))
                status, message = "failed", NOT_SENT.format(provider=self.provider_title, why=why)
            post = await conn.fetchrow("SELECT p.id, p.status FROM emails e JOIN posts p ON p.id = e.post_id "
                                       "WHERE e.id = $1", input.email_id)
            if status == "failed" and post is not None and post["status"] not in ("published", "sent"):
                message = STOPPED.format(why=unpublished(post["id"], post["status"]),
                                         submitted=counts.batches_submitted, total=counts.batches_total)
            if counts.batches_uncertain:
                message += MAY_HAVE_BEEN_SENT.format(uncertain=counts.batches_uncertain, provider=self.provider_title)
            await conn.execute(
                "UPDATE emails SET status = $2, error = nullif($3, ''), locked_by = NULL, updated_at = now(), "
                "submitted_at = CASE WHEN $2 = 'submitted' THEN now() ELSE submitted_at END, "
                "cancelled_by = CASE WHEN $2 = 'cancelled' THEN $4 END, "
                "cancelled_at = CASE WHEN $2 = 'cancelled' THEN $5::timestamptz END WHERE id = $1",
                input.email_id, status, message, input.cancelled_by, input.cancelled_at)
        return EmailOutcome(email_id=input.email_id, status=status, message=message, counts=counts)


# --- emails whose send closed without finishing them (the watchdog's newsletter job) --------------

async def _unfinished_emails(pool: asyncpg.Pool, older_than: float, after: str | None, limit: int) -> list[Watched]:
    """Emails `submitting`, unchanged for `older_than` seconds, oldest first after `after`, whose lock
    names a run of this namespace (one of another cannot be asked about from here)."""
    namespace = activity.info().namespace
    rows = await pool.fetch(
        "SELECT id, locked_by, updated_at FROM emails WHERE status = 'submitting' AND locked_by IS NOT NULL "
        "AND updated_at < now() - make_interval(secs => $1) "
        "AND ($2::timestamptz IS NULL OR (updated_at, id) > ($2, $3)) ORDER BY updated_at, id LIMIT $4",
        older_than, after[0] if after else None, after[1] if after else "", limit)
    watched = []
    for row in rows:
        holder_namespace, workflow_id, run_id = lock_holder(row["locked_by"], namespace,
                                                            f"newsletter-{row['id']}")
        if holder_namespace == namespace and workflow_id and is_run_id(run_id):
            watched.append(Watched(row, workflow_id, first_run_id=run_id))
    return watched


def closed_send_error(workflow_id: str, closed: ClosedRun) -> str:
    """What an email whose send closed unfinished stores: a failed run's own message, as the reference
    platform stores it (or its words when there is none); otherwise how the run closed."""
    if closed.status == "FAILED":
        return closed.message or SEND_FAILED
    return (f"{SEND_FAILED}: its send (workflow {workflow_id}) {closed.how()} before it finished. "
            "Send it again to retry.")


async def _fail_unfinished_email(pool: asyncpg.Pool, watched: Watched, closed: ClosedRun) -> str | None:
    """Failed with the run's reason, the lock released: `newsletter send` sends what is left (batches
    already submitted are not sent again; an uncertain one is looked up first)."""
    error = closed_send_error(watched.workflow_id, closed)[:2000]
    row = watched.row
    # Only the row as it was read: a lock taken over or an email finished since then is left alone.
    failed = await pool.fetchval(
        "UPDATE emails SET status = 'failed', error = $4, locked_by = NULL, updated_at = now() "
        "WHERE id = $1 AND status = 'submitting' AND locked_by = $2 AND updated_at = $3 RETURNING id",
        row["id"], row["locked_by"], row["updated_at"], error)
    return error if failed is not None else None


UNFINISHED_EMAILS = Job("email", _unfinished_emails, _fail_unfinished_email,
                        cursor=lambda watched: (watched.row["updated_at"], watched.row["id"]))

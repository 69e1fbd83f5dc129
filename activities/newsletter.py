"""Newsletter sending: the status lock, batches of recipients, one Mailgun call per batch.

Each activity is one unit of I/O that is safe to run again: the lock recognises its own holder,
batches are created in one transaction or not at all, a batch already submitted is never sent
again, and a batch whose last send was uncertain (see activities/confirm.py) is looked up in
Mailgun's events by its own `v:pressroom-batch` mark before anything is resent.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from email.utils import formataddr, parseaddr

from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.confirm import confirm_wait, lookup_window, uncertain_sends_exhausted
from activities.email_content import LoadedEmail, load_email
from activities.heartbeat import heartbeating
from activities.sending_limits import learned_batch_sizes, sending_domain, warmup_limit
from activities.watchdog import SEND_FAILED, ClosedRun, Job, Watched
from pressroom.dependencies import Dependencies
from pressroom.inputs import PLAIN_ADDRESS, SPECIAL_USE_DOMAINS, recipient_problem
from pressroom.mailgun import (ACCEPTED, NOT_ACCEPTED, UNCERTAIN, MailgunClient, MailgunError, MailgunRateLimited,
                               MailgunRejected, MailgunUnavailable, MessageFields, RecipientLimitExceeded,
                               message_fields)
from pressroom.email_rendering import (FREE, NOT_FREE, BodyCache, ContentError, Rendered, member_values,
                                       recipient_statuses, render, segments_needed)

PARTIALLY_SENT = "The email was only partially sent: {failed} of {total} batches failed. Send it again to retry them."
SENDING_LIMIT_SECONDS = 60
STOPPED = ("The email was stopped: {why}; {submitted} of {total} batches had been sent and nothing more is. "
           "Publish the post again, then send it to send the rest.")
NOT_SENT = "The email failed to send: no batch was accepted by Mailgun. Send it again to retry."
MAY_HAVE_BEEN_SENT = (" {uncertain} of the failed batches may have reached Mailgun all the same: sending again looks "
                      "them up in Mailgun's events first and sends only those it cannot find.")
# The last detail of a send_batch failure that is an outage (Mailgun not reached, or asking to slow
# down), not a verdict on the batch: the workflow waits for Mailgun instead of failing it.
MAILGUN_UNREACHABLE = "mailgun-unreachable"
BATCH_MARK = "pressroom-batch"  # the v: variable that proves which batch a message carried


# --- inputs and results ---------------------------------------------------------------------------

class LockEmailInput(BaseModel):
    email_id: str
    holder: str  # the first run id of the workflow chain that takes the lock (stored with its workflow id)


class SendPlan(BaseModel):
    """The settings a send runs with, read once by an activity so the workflow stays pure."""

    batch_size: int
    concurrency: int
    mailgun_retries: int
    mailgun_retry_seconds: float
    delivery_window_seconds: int
    send_caps: bool = False  # an hourly or daily cap applies: each batch is admitted under it first
    # Mailgun unreachable after the retries: wait this long, doubling up to the longest, and go on.
    outage_first_wait_seconds: float = 60.0
    outage_max_wait_seconds: float = 3600.0


class EmailLock(BaseModel):
    acquired: bool
    reason: str = ""  # why not acquired; or, acquired from a sender proved gone, whose lock was taken
    post_id: str | None = None
    plan: SendPlan | None = None


class CreateBatchesInput(BaseModel):
    email_id: str
    retry_failed: bool  # a new send of a failed email sends its failed batches again
    # One chunk of batches per call, each committed whole, until `BatchCounts.creating` is False:
    # sending starts while the rest are written. False (runs started before chunks): all at once.
    chunked: bool = False


class BatchCounts(BaseModel):
    batches_total: int
    batches_submitted: int
    batches_failed: int
    recipients_total: int
    recipients_submitted: int
    batches_uncertain: int = 0  # failed batches whose last send may have reached Mailgun
    # More batches are still to be written (chunked creation); the totals are then the planned ones.
    creating: bool = False


class ListUnsentBatchesInput(BaseModel):
    email_id: str
    limit: int


class SendBatchInput(BaseModel):
    batch_id: str
    delivery_time: datetime | None = None
    # The workflow waits on a timer when asked to (BatchSent.confirm_in_seconds). False: runs
    # started before that existed, for which an uncertain batch not found is resent at once.
    confirm: bool = False


class BatchSent(BaseModel):
    batch_id: str
    recipients: int
    provider_id: str
    reconciled: bool  # an earlier attempt had reached Mailgun; nothing was sent again
    # Set when an uncertain send is not in Mailgun's events yet: nothing was sent; look again then.
    confirm_in_seconds: float | None = None


class FailBatchInput(BaseModel):
    batch_id: str
    status_code: int | None
    message: str


class FinishEmailInput(BaseModel):
    email_id: str


class EmailOutcome(BaseModel):
    email_id: str
    status: str  # submitted | failed | skipped
    message: str = ""
    counts: BatchCounts | None = None


# The email's audience: subscribers of its newsletter in the chosen statuses, who may receive email,
# are not suppressed, and existed when the email was made. $1 newsletter, $2 statuses, $3 email time.
RECIPIENTS = """
    FROM members m
    JOIN members_newsletters mn ON mn.member_id = m.id AND mn.newsletter_id = $1
    WHERE m.status = ANY($2::text[]) AND NOT m.email_disabled AND m.created_at <= $3
      AND NOT EXISTS (SELECT 1 FROM suppressions s WHERE s.email = m.email)
"""


# Members of the audience ($1-$3 as RECIPIENTS) whose address is not of the plain shape ($4,
# pressroom.inputs.PLAIN_ADDRESS) or is in a special-use domain ($5): each is checked by
# email-validator before batches are planned. One pass over the audience; most rows match.
UNPLAIN_ADDRESSES = f"""
    SELECT m.id, m.email {RECIPIENTS}
      AND NOT (m.email ~ $4 AND length(m.email) <= 254 AND strpos(m.email, '@') <= 65
               AND lower(substring(m.email FROM '[^.]+$')) <> ALL($5::text[]))
"""
# Leaves out the members recorded as unusable for the email numbered `param`.
NOT_SKIPPED = ("AND NOT EXISTS (SELECT 1 FROM email_skipped_recipients x "
               "WHERE x.email_id = ${param} AND x.member_id = m.id)")


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
                  b.first_uncertain_at, now() AS now,
                  extract(epoch FROM now() - b.last_uncertain_at)::float8 AS uncertain_for)
    SELECT claimed.*, r.emails, r.names, r.uuids, r.statuses
    FROM claimed, LATERAL (
        SELECT array_agg(r.member_email ORDER BY r.id) AS emails, array_agg(r.member_name ORDER BY r.id) AS names,
               array_agg(r.member_uuid::text ORDER BY r.id) AS uuids,
               array_agg(coalesce(m.status, '') ORDER BY r.id) AS statuses
        FROM email_recipients r LEFT JOIN members m ON m.id = r.member_id WHERE r.batch_id = claimed.id) r
"""


SKIPPED_SHOWN = 20  # members named in the log line of an email's left-out members; the rest are counted
# The email's count becomes the recipients written ($2); the site's own count is kept when they
# differ by more than 1% (returned then, NULL otherwise), for the log and `newsletter status`.
RECORD_EMAIL_COUNT = """
    WITH old AS (SELECT email_count FROM emails WHERE id = $1),
    drift AS (SELECT email_count AS expected FROM old
              WHERE email_count > 0 AND abs($2::int - email_count) > email_count * 0.01)
    UPDATE emails e SET email_count = $2, updated_at = now(),
           email_count_expected = coalesce((SELECT expected FROM drift), e.email_count_expected)
    WHERE e.id = $1 RETURNING (SELECT expected FROM drift)
"""


CHUNK_BATCHES = 10  # batches per chunk of a chunked creation: the first go out while the next are written
SEGMENT_NAMES = {FREE: "free", NOT_FREE: "paid"}  # in batch ids; an unsegmented email's batches say "all"
# A member's place in the warming order (open rate highest first, none last; then member id) as
# one ascending key.
RANK_KEY = "coalesce(-m.email_open_rate::float8, 'Infinity'::float8)"


def falls_back(rate: str, member_id: str) -> str:
    """Whether a member is at or past the first one who falls back (NULLs: nobody does)."""
    return f"coalesce(({RANK_KEY}, m.id) >= ({rate}::float8, {member_id}::text), false)"


# One chunk of a group: $4 segment (NULL: unsegmented), $5-$6 warming's first fallback, $7 the
# group's domain, $8 the last member written in the group, $9 how many, $10 the batch id prefix,
# $11 the first batch's number, $12 the batch size, $13 the email. `after` is formatted in as a plain
# range condition (not "$8 IS NULL OR ..."), so that every chunk is an index range scan.
WRITE_CHUNK = f"""
    WITH chosen AS (
        SELECT m.id, m.uuid, m.email, m.name
        {RECIPIENTS}
          AND ($4::text IS NULL OR (m.status = 'free') = ($4::text = 'status:free'))
          AND {falls_back('$5', '$6')} = $7
          {NOT_SKIPPED.format(param=13)}
          {{after}}
        ORDER BY m.id LIMIT $9),
    numbered AS (
        SELECT chosen.*, $10 || '-' || lpad(($11 + (row_number() OVER (ORDER BY id) - 1) / $12)::text, 5, '0')
                         AS batch_id
        FROM chosen),
    batches AS (
        INSERT INTO email_batches (id, email_id, member_segment, fallback_sending_domain)
        SELECT DISTINCT batch_id, $13, $4, $7 FROM numbered),
    recipients AS (
        INSERT INTO email_recipients (email_id, member_id, batch_id, member_uuid, member_email, member_name)
        SELECT $13, id, batch_id, uuid, email, name FROM numbered)
    SELECT count(*) AS n, max(id) AS last FROM numbered
"""


def creation_groups(segmented: bool, warming: bool) -> list[tuple[str | None, bool]]:
    """The groups a chunked creation writes in turn: (segment, through the fallback domain)."""
    return [(segment, fallback) for segment in ((FREE, NOT_FREE) if segmented else (None,))
            for fallback in ((False, True) if warming else (False,))]


def fallback_sender(from_address: str, fallback_address: str) -> str:
    """The From of a batch sent through the fallback domain: the same name at the fallback address
    (Mailgun signs for its own domain); replies still reach the sender through Reply-To."""
    name, _ = parseaddr(from_address)
    return formataddr((name, fallback_address)) if name else fallback_address


def unpublished(post_id: str, post_status: str) -> str:
    return f"its post {post_id} is {post_status}, no longer published"


def lock_holder(locked_by: str, namespace: str, workflow_id: str) -> tuple[str, str, str]:
    """(namespace, workflow id, first run id) of an email's lock, stored as `namespace/workflow
    id/first run id`; a bare run id, as 0.1.0 wrote it, is a run of `workflow_id` in `namespace`."""
    if "/" in locked_by:
        holder_namespace, _, rest = locked_by.partition("/")
        holder_workflow_id, _, run_id = rest.rpartition("/")  # a workflow id may itself hold a slash
        return holder_namespace, holder_workflow_id, run_id
    return namespace, workflow_id, locked_by


def _is_run_id(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _non_retryable(message: str, kind: str) -> ApplicationError:
    return ApplicationError(message, type=kind, non_retryable=True)


class NewsletterActivities:
    def __init__(self, deps: Dependencies) -> None:
        self.pool = deps.pool
        self.mailgun = deps.mailgun
        self.settings = deps.settings
        self.temporal = deps.temporal  # asks whether another holder of an email's lock is gone
        # Bodies rendered once per (email, segment) and reused for every batch in this worker.
        self._bodies = BodyCache(deps.settings.body_cache_bytes)

    def _plan(self) -> SendPlan:
        s = self.settings
        return SendPlan(batch_size=s.batch_size, concurrency=s.send_concurrency, mailgun_retries=s.mailgun_retries,
                        mailgun_retry_seconds=s.mailgun_retry_seconds,
                        delivery_window_seconds=s.delivery_window_seconds,
                        send_caps=bool(s.hourly_send_limit or s.daily_send_limit),
                        outage_first_wait_seconds=s.mailgun_outage_first_wait_seconds,
                        outage_max_wait_seconds=s.mailgun_outage_max_wait_seconds)

    @activity.defn
    async def lock_email(self, input: LockEmailInput) -> EmailLock:
        """Move the email from pending or failed to submitting for this run; its own lock is kept.

        Safe to repeat: the holder finds its own lock. Bad input (unknown email, a filter that cannot
        be parsed, nobody to send to) fails before anything is written.
        """
        async with self.pool.acquire() as conn, conn.transaction():
            email = await conn.fetchrow(
                "SELECT e.status, e.locked_by, e.post_id, e.newsletter_id, e.recipient_filter, e.created_at, "
                "p.status AS post_status FROM emails e LEFT JOIN posts p ON p.id = e.post_id "
                "WHERE e.id = $1 FOR UPDATE OF e", input.email_id)
            if email is None:
                raise _non_retryable(f"email {input.email_id} does not exist", "EmailNotFound")
            if email["status"] == "submitted":
                return EmailLock(acquired=False, reason=f"email {input.email_id} is already submitted")
            refused = self._unpublished(email)
            if refused:
                # Failed with the reason, whoever held it: a send resumed or taken over after its post
                # was moved back to draft sends nothing more. Committed, then refused (below).
                await conn.execute("UPDATE emails SET status = 'failed', error = $2, locked_by = NULL, "
                                   "updated_at = now() WHERE id = $1", input.email_id, refused)
            else:
                return await self._lock(conn, input, email)
        raise _non_retryable(refused, "PostNotPublished")

    @staticmethod
    def _unpublished(email) -> str:
        """Why the email's post stops it (it is a draft or scheduled again), or "" when it may go out."""
        if email["post_status"] in (None, "published", "sent"):
            return ""
        return (f"The email is not sent: {unpublished(email['post_id'], email['post_status'])}. "
                "Publish the post again, then send it.")

    async def _lock(self, conn, input: LockEmailInput, email) -> EmailLock:
        """The lock itself, in the caller's transaction: taken over from a sender proved gone, and
        refused for bad input before anything is written."""
        holder = self._holder(input.holder)
        took_over = ""
        if email["status"] == "submitting":
            if email["locked_by"] in (holder, input.holder):  # a bare run id: a lock taken by 0.1.0
                return EmailLock(acquired=True, post_id=email["post_id"], plan=self._plan())
            took_over = await self._take_over(input.email_id, email["locked_by"])
        try:
            statuses = recipient_statuses(email["recipient_filter"])
        except ValueError as error:
            raise _non_retryable(f"email {input.email_id}: {error}", "BadRecipientFilter") from None
        if email["newsletter_id"] is None:
            raise _non_retryable(f"email {input.email_id} has no newsletter to send to", "NoNewsletter")
        await self._check_content(conn, input.email_id)
        has_batches = await conn.fetchval("SELECT EXISTS (SELECT 1 FROM email_batches WHERE email_id = $1)",
                                          input.email_id)
        if not has_batches and not await conn.fetchval(
                f"SELECT EXISTS (SELECT 1 {RECIPIENTS})", email["newsletter_id"], statuses, email["created_at"]):
            raise _non_retryable(f"email {input.email_id}: newsletter {email['newsletter_id']} has no subscribers "
                                 f"matching {email['recipient_filter']!r}", "NoRecipients")
        await conn.execute(
            "UPDATE emails SET status = 'submitting', locked_by = $2, error = NULL, updated_at = now() "
            "WHERE id = $1", input.email_id, holder)
        activity.logger.info("locked email %s for sending", input.email_id)
        return EmailLock(acquired=True, reason=took_over, post_id=email["post_id"], plan=self._plan())

    @staticmethod
    def _holder(first_run_id: str) -> str:
        """The lock holder as `namespace/workflow id/first run id`: enough to ask Temporal about it."""
        info = activity.info()
        return f"{info.namespace}/{info.workflow_id}/{first_run_id}"

    async def _take_over(self, email_id: str, locked_by: str) -> str:
        """Another sender holds the email: refuse, unless Temporal proves that sender gone.

        Gone means its run is closed, or does not exist in this namespace. A holder in another
        namespace, or one that is not a Temporal run at all, cannot be proved gone: refused.
        """
        from temporalio.client import WorkflowExecutionStatus

        info = activity.info()
        namespace, workflow_id, run_id = lock_holder(locked_by, info.namespace, info.workflow_id)
        refused = f"email {email_id} is being sent by {locked_by}"
        if namespace != info.namespace or not workflow_id or not _is_run_id(run_id):
            raise _non_retryable(f"{refused}, which cannot be checked from namespace {info.namespace}; "
                                 "refusing to send it twice", "EmailLockedByAnotherSender")
        latest = await self._describe(workflow_id)
        run = latest if latest is not None and run_id in (latest.run_id, latest.raw_info.first_run_id) \
            else await self._describe(workflow_id, run_id)
        if run is not None and run.status == WorkflowExecutionStatus.RUNNING:
            raise _non_retryable(f"{refused}, which is still running; refusing to send it twice",
                                 "EmailLockedByAnotherSender")
        how = f"closed ({run.status.name.lower()})" if run is not None and run.status else \
            f"not found in namespace {info.namespace}"
        took_over = f"took over email {email_id} from {locked_by}, which is {how}"
        activity.logger.warning("%s", took_over)
        return took_over

    async def _describe(self, workflow_id: str, run_id: str | None = None):
        """The run (the latest one without run_id), or None when this namespace has no such run."""
        from temporalio.service import RPCError, RPCStatusCode

        try:
            return await self.temporal.get_workflow_handle(workflow_id, run_id=run_id).describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return None
            raise ApplicationError(f"cannot ask Temporal about {workflow_id}: {error.message}",
                                   type="TemporalUnavailable") from None

    @activity.defn
    async def create_batches(self, input: CreateBatchesInput) -> BatchCounts:
        """Every recipient in exactly one batch; existing batches are reused. Written in one
        transaction, or chunked: one chunk per call, each in its own (see `_create_chunk`)."""
        async with heartbeating(), self.pool.acquire() as conn, conn.transaction():
            email = await conn.fetchrow(
                "SELECT newsletter_id, recipient_filter, created_at FROM emails WHERE id = $1 FOR UPDATE",
                input.email_id)
            if email is None:
                raise _non_retryable(f"email {input.email_id} does not exist", "EmailNotFound")
            has_batches = await conn.fetchval("SELECT EXISTS (SELECT 1 FROM email_batches WHERE email_id = $1)",
                                              input.email_id)
            creation = await conn.fetchrow("SELECT * FROM email_batch_creation WHERE email_id = $1", input.email_id)
            if creation is not None or (input.chunked and not has_batches):
                return await self._create_chunk(conn, input, email, creation)
            if has_batches:
                if input.retry_failed:
                    await self._retry_failed_batches(conn, input.email_id)
            else:
                activity.logger.info("creating batches for email %s", input.email_id)
                await self._leave_out_unusable(conn, input.email_id, email)
                segmented = segments_needed((await self._load(conn, input.email_id)).content)
                custom_limit = await self._warmup_limit(conn) if self.settings.warming else None
                sizes = await self._batch_sizes(conn)
                # Domain warming: the first `custom_limit` recipients, most engaged first (a new
                # domain's reputation grows on opens), go through the custom domain, the rest
                # through the fallback one, in batches of their own.
                await conn.execute(f"""
                    WITH chosen AS (
                        SELECT m.id, m.uuid, m.email, m.name, m.email_open_rate,
                               CASE WHEN $5 THEN CASE WHEN m.status = 'free' THEN 'status:free'
                                                      ELSE 'status:-free' END END AS segment
                        {RECIPIENTS} {NOT_SKIPPED.format(param=4)}),
                    ranked AS (
                        SELECT chosen.*, coalesce(row_number() OVER (ORDER BY email_open_rate DESC NULLS LAST, id)
                                                  > $7::int, false) AS fallback
                        FROM chosen),
                    numbered AS (
                        SELECT ranked.*,
                               $4 || '-' || CASE segment WHEN 'status:free' THEN 'free'
                                                         WHEN 'status:-free' THEN 'paid' ELSE 'all' END
                                  || CASE WHEN fallback THEN '-fallback' ELSE '' END
                                  || '-' || lpad(((row_number() OVER (PARTITION BY segment, fallback ORDER BY id) - 1)
                                                  / CASE WHEN fallback THEN $8::int ELSE $6::int END)::text, 5, '0') AS batch_id
                        FROM ranked),
                    batches AS (
                        INSERT INTO email_batches (id, email_id, member_segment, fallback_sending_domain)
                        SELECT DISTINCT batch_id, $4, segment, fallback FROM numbered)
                    INSERT INTO email_recipients (email_id, member_id, batch_id, member_uuid, member_email, member_name)
                    SELECT $4, id, batch_id, uuid, email, name FROM numbered""",
                    email["newsletter_id"], recipient_statuses(email["recipient_filter"]), email["created_at"],
                    input.email_id, segmented, sizes[False], custom_limit, sizes[True])
            return await self._record_written(conn, input.email_id, created=not has_batches)

    async def _retry_failed_batches(self, conn, email_id: str) -> None:
        """A new send of a failed email sends its failed batches again. The send outcome stays: an
        uncertain batch is looked up before it is sent again."""
        await conn.execute("UPDATE email_batches SET status = 'pending', send_attempts = 0, updated_at = now() "
                           "WHERE email_id = $1 AND status = 'failed'", email_id)

    async def _record_written(self, conn, email_id: str, *, created: bool) -> BatchCounts:
        """The email's counts from the rows really written, not the ones planned, so reports match
        the send; with warming, a creation just finished also records how many go through the
        custom domain."""
        if created and self.settings.warming:
            await conn.execute(
                """UPDATE emails SET csd_email_count = (
                       SELECT count(*) FROM email_recipients r JOIN email_batches b ON b.id = r.batch_id
                       WHERE r.email_id = $1 AND NOT b.fallback_sending_domain) WHERE id = $1""", email_id)
        counts = await self._counts(conn, email_id)
        expected = await conn.fetchval(RECORD_EMAIL_COUNT, email_id, counts.recipients_total)
        if expected is not None:
            activity.logger.warning("email %s: %d recipients written, not the %d the site counted (%+.1f%%); "
                                    "email_count corrected", email_id, counts.recipients_total, expected,
                                    100 * (counts.recipients_total - expected) / expected)
        return counts

    async def _create_chunk(self, conn, input: CreateBatchesInput, email, creation) -> BatchCounts:
        """Plan the creation on the first call, then write the next chunk (chunked) or every chunk
        left; the totals are the planned ones until the last chunk is written."""
        if creation is None:
            creation = await self._plan_creation(conn, input.email_id, email)
        elif input.retry_failed:
            await self._retry_failed_batches(conn, input.email_id)
        while not creation["done"]:
            creation = await self._write_chunk(conn, input.email_id, email, creation)
            if input.chunked:
                break
        if not creation["done"]:
            return BatchCounts(batches_total=creation["planned_batches"], batches_submitted=0, batches_failed=0,
                               recipients_total=creation["planned_recipients"], recipients_submitted=0,
                               creating=True)
        return await self._record_written(conn, input.email_id, created=True)

    async def _plan_creation(self, conn, email_id: str, email):
        """Fix what every chunk must agree on: segments, batch sizes, where warming falls back; and
        count the audience per group for the planned totals."""
        activity.logger.info("creating batches for email %s in chunks", email_id)
        await self._leave_out_unusable(conn, email_id, email)
        segmented = segments_needed((await self._load(conn, email_id)).content)
        custom_limit = await self._warmup_limit(conn) if self.settings.warming else None
        sizes = await self._batch_sizes(conn)
        audience = (email["newsletter_id"], recipient_statuses(email["recipient_filter"]), email["created_at"])
        rate, first_id = None, None
        if custom_limit is not None:
            # Domain warming: the first `custom_limit` recipients, most engaged first (a new
            # domain's reputation grows on opens), go through the custom domain, the rest through
            # the fallback one, in batches of their own.
            row = await conn.fetchrow(f"SELECT {RANK_KEY} AS rate, m.id {RECIPIENTS} {NOT_SKIPPED.format(param=5)} "
                                      "ORDER BY m.email_open_rate DESC NULLS LAST, m.id OFFSET $4 LIMIT 1",
                                      *audience, custom_limit, email_id)
            rate, first_id = (row["rate"], row["id"]) if row else (None, None)
        planned = await conn.fetch(
            f"""SELECT m.status = 'free' AS free, {falls_back('$4', '$5')} AS fallback, count(*) AS n {RECIPIENTS}
                {NOT_SKIPPED.format(param=6)} GROUP BY 1, 2""", *audience, rate, first_id, email_id)
        batches = sum(-(-row["n"] // sizes[row["fallback"]]) for row in planned) if segmented else sum(
            -(-sum(row["n"] for row in planned if row["fallback"] == fallback) // sizes[fallback])
            for fallback in (False, True))
        return await conn.fetchrow(
            """INSERT INTO email_batch_creation (email_id, segmented, batch_size, fallback_batch_size,
                   fallback_from_rate, fallback_from_id, planned_batches, planned_recipients)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING *""",
            email_id, segmented, sizes[False], sizes[True], rate, first_id, batches,
            sum(row["n"] for row in planned))

    async def _leave_out_unusable(self, conn, email_id: str, email) -> None:
        """Record the members whose stored address cannot be a recipient as left out of the email, by
        id and reason, and count them on it, in the caller's transaction (with the plan, so every
        chunk leaves out the same members); one bad row never fails the batch it would have joined."""
        rows = await conn.fetch(UNPLAIN_ADDRESSES, email["newsletter_id"], recipient_statuses(email["recipient_filter"]),
                                email["created_at"], PLAIN_ADDRESS, list(SPECIAL_USE_DOMAINS))
        skipped = [(row["id"], problem) for row in rows if (problem := recipient_problem(row["email"])) is not None]
        if skipped:
            await conn.execute(
                "INSERT INTO email_skipped_recipients (email_id, member_id, reason) "
                "SELECT $1, id, reason FROM unnest($2::text[], $3::text[]) AS s (id, reason) ON CONFLICT DO NOTHING",
                email_id, [member for member, _ in skipped], [reason for _, reason in skipped])
            shown = "; ".join(f"member {member} {reason}" for member, reason in skipped[:SKIPPED_SHOWN])
            more = f"; and {len(skipped) - SKIPPED_SHOWN} more" if len(skipped) > SKIPPED_SHOWN else ""
            activity.logger.warning("email %s: %d members left out, their address cannot be a recipient: %s%s",
                                    email_id, len(skipped), shown, more)
        await conn.execute("UPDATE emails SET skipped_recipients = (SELECT count(*) FROM email_skipped_recipients "
                           "WHERE email_id = $1) WHERE id = $1", email_id)

    async def _write_chunk(self, conn, email_id: str, email, creation):
        """The next chunk of the current group's recipients in member id order, as whole batches,
        and the cursor moved past it, in the caller's transaction; an exhausted group moves the
        cursor to the next one."""
        groups = creation_groups(creation["segmented"], creation["fallback_from_id"] is not None)
        segment, fallback = groups[creation["group_index"]]
        size = creation["fallback_batch_size"] if fallback else creation["batch_size"]
        limit = CHUNK_BATCHES * size
        prefix = f"{email_id}-{SEGMENT_NAMES.get(segment, 'all')}{'-fallback' if fallback else ''}"
        # The bound on both sides of the join, so that neither index is read from its start.
        after = "AND m.id > $8::text AND mn.member_id > $8::text" if creation["after_member_id"] is not None \
            else "AND $8::text IS NULL"
        written = await conn.fetchrow(
            WRITE_CHUNK.format(after=after), email["newsletter_id"], recipient_statuses(email["recipient_filter"]),
            email["created_at"], segment, creation["fallback_from_rate"], creation["fallback_from_id"], fallback,
            creation["after_member_id"], limit, prefix, creation["written_in_group"] // size, size, email_id)
        if written["n"] < limit:  # the group is exhausted: the next chunk starts the next group
            group, after, in_group = creation["group_index"] + 1, None, 0
        else:
            group, after, in_group = creation["group_index"], written["last"], creation["written_in_group"] + limit
        return await conn.fetchrow(
            """UPDATE email_batch_creation SET group_index = $2, after_member_id = $3, written_in_group = $4,
                      done = $5, updated_at = now()
               WHERE email_id = $1 RETURNING *""", email_id, group, after, in_group, group >= len(groups))

    async def _warmup_limit(self, conn) -> int | None:
        """Today's warm-up limit, counting days from the first email sent with warming."""
        day = await conn.fetchval(
            """SELECT coalesce(floor(extract(epoch FROM now() - min(b.created_at)) / 86400), 0)::int
               FROM email_batches b JOIN emails e ON e.id = b.email_id WHERE e.csd_email_count IS NOT NULL""")
        limit = warmup_limit(day)
        activity.logger.info("domain warming day %d: %s recipients through %s", day,
                             "all" if limit is None else limit, self.settings.mailgun_domain)
        return limit

    async def _batch_sizes(self, conn) -> dict[bool, int]:
        """Batch size per kind of batch (fallback or not): the setting, or less where a domain has
        refused larger batches."""
        domains = {fallback: sending_domain(self.settings, fallback) for fallback in (False, True)}
        learned = await learned_batch_sizes(conn, list(domains.values()))
        return {fallback: min(self.settings.batch_size, learned.get(domain, self.settings.batch_size))
                for fallback, domain in domains.items()}

    @staticmethod
    async def _counts(conn, email_id: str) -> BatchCounts:
        row = await conn.fetchrow(
            """SELECT count(*) AS total,
                      count(*) FILTER (WHERE b.status = 'submitted') AS submitted,
                      count(*) FILTER (WHERE b.status = 'failed') AS failed,
                      count(*) FILTER (WHERE b.status = 'failed' AND b.send_outcome = 'uncertain') AS uncertain,
                      coalesce(sum(r.n), 0) AS recipients,
                      coalesce(sum(r.n) FILTER (WHERE b.status = 'submitted'), 0) AS recipients_submitted
               FROM email_batches b
               JOIN LATERAL (SELECT count(*) AS n FROM email_recipients WHERE batch_id = b.id) r ON true
               WHERE b.email_id = $1 AND b.status <> 'retired'""", email_id)
        return BatchCounts(batches_total=row["total"], batches_submitted=row["submitted"],
                           batches_failed=row["failed"], recipients_total=row["recipients"],
                           recipients_submitted=row["recipients_submitted"], batches_uncertain=row["uncertain"])

    @activity.defn
    async def list_unsent_batches(self, input: ListUnsentBatchesInput) -> list[str]:
        """The next batch ids still to send (pending, or interrupted mid-send), in order."""
        rows = await self.pool.fetch(
            "SELECT id FROM email_batches WHERE email_id = $1 AND status IN ('pending', 'submitting') "
            "ORDER BY id LIMIT $2", input.email_id, input.limit)
        return [row["id"] for row in rows]

    @activity.defn
    async def send_batch(self, input: SendBatchInput) -> BatchSent:
        """One Mailgun message for the batch's recipients.

        Safe to repeat: a submitted batch is not sent again, and a batch whose last send was
        uncertain is first looked up in Mailgun's events; while it may still appear there, nothing
        is sent and the workflow is told when to look again.
        """
        async with heartbeating():
            return await self._send_batch(input)

    async def _send_batch(self, input: SendBatchInput) -> BatchSent:
        # One statement claims the batch, reads its recipients and, unless its last send was
        # uncertain (then it is looked up first), records this attempt as uncertain: committed
        # before the request goes out, so a worker killed mid-send leaves "uncertain" behind.
        batch = await self.pool.fetchrow(CLAIM_BATCH, input.batch_id)
        if batch is None:
            done = await self.pool.fetchrow(
                "SELECT b.status, b.provider_id, e.post_id, p.status AS post_status, "
                "(SELECT count(*) FROM email_recipients WHERE batch_id = $1) AS n FROM email_batches b "
                "JOIN emails e ON e.id = b.email_id LEFT JOIN posts p ON p.id = e.post_id WHERE b.id = $1",
                input.batch_id)
            if done is None:
                raise _non_retryable(f"batch {input.batch_id} does not exist", "BatchNotFound")
            if done["status"] != "submitted":  # not claimed: its post is no longer published
                raise _non_retryable(f"batch {input.batch_id} is not sent: "
                                     f"{unpublished(done['post_id'], done['post_status'])}", "PostNotPublished")
            return BatchSent(batch_id=input.batch_id, recipients=done["n"], provider_id=done["provider_id"],
                             reconciled=True)
        addresses = batch["emails"] or []
        # The batch's domain decides the request URL, the From address and where its events are.
        mailgun = self.mailgun.for_domain(sending_domain(self.settings, batch["fallback_sending_domain"]))
        message_id = f"{input.batch_id}@{mailgun.domain}"
        try:
            body, fields = await self._message(batch["email_id"], batch["member_segment"], mailgun.domain)
        except Exception:
            if batch["send_outcome"] != UNCERTAIN:  # marked by the claim, yet nothing went out
                await self._record_outcome(input.batch_id, NOT_ACCEPTED)
            raise
        if batch["send_outcome"] == UNCERTAIN:
            provider_id = await self._find_accepted(mailgun, input.batch_id, addresses[0], message_id,
                                                    *lookup_window(batch["first_uncertain_at"], batch["now"]))
            if provider_id is not None:
                activity.logger.info("batch %s was accepted by an earlier attempt; not sending it again",
                                     input.batch_id)
                await self._record_submitted(input.batch_id, provider_id)
                return BatchSent(batch_id=input.batch_id, recipients=len(addresses), provider_id=provider_id,
                                 reconciled=True)
            wait = confirm_wait(batch["uncertain_for"], self.settings, input.confirm)
            if wait is not None:
                activity.logger.info("batch %s may have been accepted and is not in Mailgun's events yet; "
                                     "looking again in %.0f s", input.batch_id, wait)
                return BatchSent(batch_id=input.batch_id, recipients=len(addresses), provider_id="",
                                 reconciled=False, confirm_in_seconds=wait)
            if batch["send_attempts"] >= self.settings.mailgun_retries + 1:
                raise uncertain_sends_exhausted(f"batch {input.batch_id}", batch["send_attempts"])
            await self._record_outcome(input.batch_id, UNCERTAIN, sending=True)  # until the answer says otherwise

        # Each reader's personalisation, resolved here so that no address enters a workflow history.
        site_url, email_id = self.settings.site_url, batch["email_id"]
        variables = {
            address: body.recipient_variables(member_values(
                name=name, email=address, uuid=uuid, status=status, site_url=site_url, email_id=email_id))
            for address, name, uuid, status in zip(addresses, batch["names"] or [], batch["uuids"] or [],
                                                   batch["statuses"] or [])}
        activity.logger.info("sending batch %s (%d recipients)", input.batch_id, len(addresses))
        try:
            try:
                provider_id = await mailgun.send_fields(
                    fields, to=list(variables), recipient_variables=variables,
                    variables={"email-id": email_id, BATCH_MARK: input.batch_id},
                    headers={"Message-Id": f"<{message_id}>"}, delivery_time=input.delivery_time)
            except MailgunError as error:
                await self._record_outcome(input.batch_id, error.outcome)
                raise
        except RecipientLimitExceeded as error:
            # Certainly not accepted; the workflow splits the batch into smaller ones.
            raise ApplicationError(str(error), error.status_code, len(addresses), error.limit,
                                   type="RecipientLimitExceeded", non_retryable=True) from None
        except MailgunRejected as error:
            raise ApplicationError(str(error), error.status_code, type="MailgunRejected", non_retryable=True) from None
        except MailgunRateLimited as error:
            delay = timedelta(seconds=error.retry_after) if error.retry_after is not None else None
            # A wait of a minute or more is the domain's hourly or daily cap: newer runs wait for it
            # on a workflow timer (SendingLimitReached is not retried by their policy).
            long_wait = error.retry_after is not None and error.retry_after >= SENDING_LIMIT_SECONDS
            raise ApplicationError(str(error), error.status_code, error.retry_after,
                                   *([] if long_wait else [MAILGUN_UNREACHABLE]),
                                   type="SendingLimitReached" if long_wait else "MailgunRateLimited",
                                   next_retry_delay=delay) from None
        except MailgunError as error:
            # Not taken for a reason that will pass (no connection, a request never written): the
            # workflow waits for Mailgun once the retries are spent. An uncertain one is not marked.
            unreachable = [MAILGUN_UNREACHABLE] if isinstance(error, MailgunUnavailable) \
                and error.outcome == NOT_ACCEPTED else []
            raise ApplicationError(str(error), error.status_code, *unreachable, type=type(error).__name__) from None
        await self._record_submitted(input.batch_id, provider_id)
        return BatchSent(batch_id=input.batch_id, recipients=len(addresses), provider_id=provider_id,
                         reconciled=False)

    async def _find_accepted(self, mailgun: MailgunClient, batch_id: str, first_recipient: str, message_id: str,
                             begin: datetime, end: datetime) -> str | None:
        try:
            return await mailgun.find_accepted(recipient=first_recipient, variables={BATCH_MARK: batch_id},
                                               begin=begin, end=end, message_id=message_id)
        except MailgunError as error:
            # Mailgun's events cannot be read: nothing is sent until they can, and that is an outage.
            raise ApplicationError(f"cannot check whether batch {batch_id} was accepted: {error}",
                                   None, MAILGUN_UNREACHABLE, type="MailgunUnavailable") from None

    async def _record_outcome(self, batch_id: str, outcome: str, *, sending: bool = False) -> None:
        """The outcome of the latest attempt; an uncertain one keeps the window's start and restarts its wait."""
        await self.pool.execute(
            """UPDATE email_batches SET send_outcome = $2, send_attempts = send_attempts + $3::int,
                      first_uncertain_at = CASE WHEN $2 <> 'uncertain' THEN NULL
                                                WHEN send_outcome = 'uncertain' THEN first_uncertain_at
                                                ELSE now() END,
                      last_uncertain_at = CASE WHEN $2 = 'uncertain' THEN now() END, updated_at = now()
               WHERE id = $1""", batch_id, outcome, 1 if sending else 0)

    async def _record_submitted(self, batch_id: str, provider_id: str) -> None:
        # One statement, so one transaction: the batch and its recipients are marked together.
        await self.pool.execute(
            """WITH batch AS (
                   UPDATE email_batches SET status = 'submitted', provider_id = $2, send_outcome = $3,
                          error_status_code = NULL, error_message = NULL, error_data = NULL, updated_at = now()
                   WHERE id = $1)
               UPDATE email_recipients SET processed_at = now() WHERE batch_id = $1""",
            batch_id, provider_id, ACCEPTED)

    async def _load(self, conn, email_id: str) -> LoadedEmail:
        try:
            loaded = await load_email(conn, email_id, self.settings)
        except ContentError as error:  # a subject or sender that cannot be a header
            raise _non_retryable(str(error), "BadContent") from None
        if loaded is None:
            raise _non_retryable(f"email {email_id} does not exist", "EmailNotFound")
        return loaded

    async def _check_content(self, conn, email_id: str) -> None:
        """Render every segment once before anything is written: bad content is refused up front."""
        content = (await self._load(conn, email_id)).content
        try:
            for segment in (FREE, NOT_FREE) if segments_needed(content) else (None,):
                render(content, segment)
        except ContentError as error:
            raise _non_retryable(str(error), "BadContent") from None

    async def _message(self, email_id: str, segment: str | None, domain: str) -> tuple[Rendered, MessageFields]:
        """The segment's rendering and its message fields through `domain`, encoded once per worker
        within the cache's size: every batch of the segment shares them."""
        cached = self._bodies.get((email_id, segment, domain))
        if cached is None:
            async with self.pool.acquire() as conn:
                loaded = await self._load(conn, email_id)
            try:
                body = render(loaded.content, segment)
            except ContentError as error:
                raise _non_retryable(str(error), "BadContent") from None
            from_address = loaded.from_address
            if domain != self.mailgun.domain:
                from_address = fallback_sender(from_address, self.settings.fallback_address)
            tags = ["bulk-email", *([self.settings.email_tag] if self.settings.email_tag else [])]
            headers = {"Reply-To": loaded.reply_to, "List-Unsubscribe": "<%recipient.unsubscribe_url%>",
                       "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"}
            fields = message_fields(from_address=from_address, subject=body.subject, html=body.html, text=body.text,
                                    tags=tags, headers=headers, tracking_opens=loaded.track_opens)
            cached = (body, fields)
            self._bodies.put((email_id, segment, domain), cached, body.size + len(fields.data))
        return cached

    @activity.defn
    async def fail_batch(self, input: FailBatchInput) -> None:
        """Record why a batch failed; its recipients were processed (tried) all the same."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "UPDATE email_batches SET status = 'failed', error_status_code = $2, error_message = $3, "
                "error_data = jsonb_build_object('message', $3::text), updated_at = now() "
                "WHERE id = $1 AND status <> 'submitted'", input.batch_id, input.status_code, input.message[:2000])
            await conn.execute("UPDATE email_recipients SET processed_at = now() WHERE batch_id = $1", input.batch_id)

    @activity.defn
    async def finish_email(self, input: FinishEmailInput) -> EmailOutcome:
        """submitted when every batch is; failed otherwise, the message saying how many batches failed."""
        async with self.pool.acquire() as conn, conn.transaction():
            counts = await self._counts(conn, input.email_id)
            if counts.batches_submitted == counts.batches_total:
                status, message = "submitted", ""
            elif counts.batches_submitted:
                status = "failed"
                message = PARTIALLY_SENT.format(failed=counts.batches_total - counts.batches_submitted,
                                                total=counts.batches_total)
            else:
                status, message = "failed", NOT_SENT
            post = await conn.fetchrow("SELECT p.id, p.status FROM emails e JOIN posts p ON p.id = e.post_id "
                                       "WHERE e.id = $1", input.email_id)
            if status == "failed" and post is not None and post["status"] not in ("published", "sent"):
                message = STOPPED.format(why=unpublished(post["id"], post["status"]),
                                         submitted=counts.batches_submitted, total=counts.batches_total)
            if counts.batches_uncertain:
                message += MAY_HAVE_BEEN_SENT.format(uncertain=counts.batches_uncertain)
            await conn.execute(
                "UPDATE emails SET status = $2, error = nullif($3, ''), locked_by = NULL, updated_at = now(), "
                "submitted_at = CASE WHEN $2 = 'submitted' THEN now() ELSE submitted_at END WHERE id = $1",
                input.email_id, status, message)
        return EmailOutcome(email_id=input.email_id, status=status, message=message, counts=counts)


# --- emails whose send closed without finishing them (the watchdog's newsletter job) --------------

async def _unfinished_emails(pool, older_than: float, after, limit: int) -> list[Watched]:
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
        if holder_namespace == namespace and workflow_id and _is_run_id(run_id):
            watched.append(Watched(row, workflow_id, first_run_id=run_id))
    return watched


def closed_send_error(workflow_id: str, closed: ClosedRun) -> str:
    """What an email whose send closed unfinished stores: a failed run's own message, as the reference
    platform stores it (or its words when there is none); otherwise how the run closed."""
    if closed.status == "FAILED":
        return closed.message or SEND_FAILED
    return f"{SEND_FAILED}: its send (workflow {workflow_id}) {closed.how()} before it finished. Send it again to retry."


async def _fail_unfinished_email(pool, watched: Watched, closed: ClosedRun) -> str | None:
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

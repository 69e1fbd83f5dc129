"""The email's status lock: pending or failed becomes submitting for one workflow chain.

Safe to repeat: the holder finds its own lock. A lock held by another sender is taken over only
when Temporal proves that sender gone. Bad input fails here, before anything is written.
"""

from __future__ import annotations

import uuid
from email.utils import parseaddr

import asyncpg
from temporalio import activity
from temporalio.client import WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.email_content import load_email
from activities.errors import non_retryable
from activities.newsletter.audience import RECIPIENTS, audience, missing
from activities.newsletter.content import check_content
from activities.newsletter.models import EmailLock, LockEmailInput, SendPlan
from pressroom.dependencies import Dependencies
from pressroom.email_rendering import ContentError
from pressroom.providers.port import AccountQuota, ProviderError
from pressroom.recipient_filter import FilterError

# Refusals of the email itself: they end it failed with the reason, so the operator reads why.
REFUSALS = frozenset({"BadRecipientFilter", "UnknownAudience", "NoNewsletter", "NewsletterArchived", "BadContent",
                      "NoRecipients", "UnverifiedSender"})

# The reference platform's words for it: an archived newsletter's readers can no longer unsubscribe
# from it, so nothing is sent to it (an email started before the archive, then scheduled, included).
ARCHIVED_NEWSLETTER = "Cannot send email to archived newsletters"


def unpublished(post_id: str, post_status: str) -> str:
    return f"its post {post_id} is {post_status}, no longer published"


def lock_holder(locked_by: str, namespace: str, workflow_id: str | None) -> tuple[str, str, str]:
    """(namespace, workflow id, first run id) of an email's lock, stored as `namespace/workflow
    id/first run id`; a bare run id (the lock's first form, still found in old rows) is a run of
    `workflow_id` in `namespace`."""
    if "/" in locked_by:
        holder_namespace, _, rest = locked_by.partition("/")
        holder_workflow_id, _, run_id = rest.rpartition("/")  # a workflow id may itself hold a slash
        return holder_namespace, holder_workflow_id, run_id
    return namespace, workflow_id or "", locked_by


def is_run_id(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


class EmailLockActivities:
    def __init__(self, deps: Dependencies) -> None:
        self.pool = deps.pool
        self.settings = deps.settings
        self.temporal = deps.temporal  # asks whether another holder of an email's lock is gone
        self.provider_title = deps.provider_title
        self.provider = deps.provider

    def _plan(self, quota: AccountQuota) -> SendPlan:
        s = self.settings
        return SendPlan(batch_size=s.batch_size, concurrency=s.send_concurrency, provider_retries=s.provider_retries,
                        provider_retry_seconds=s.provider_retry_seconds,
                        delivery_window_seconds=s.delivery_window_seconds,
                        # A cap configured, or the account's quota stating one (SES): batches are admitted.
                        send_caps=bool(s.hourly_send_limit or s.daily_send_limit) or quota.per_day is not None
                        or quota.per_hour is not None,
                        outage_first_wait_seconds=s.provider_outage_first_wait_seconds,
                        outage_max_wait_seconds=s.provider_outage_max_wait_seconds, provider_title=self.provider_title,
                        provider_probe_seconds=s.provider_probe_seconds,
                        reputation_check_seconds=s.reputation_check_seconds,
                        heartbeat_seconds=s.send_heartbeat_seconds)

    @activity.defn
    async def lock_email(self, input: LockEmailInput) -> EmailLock:
        """Move the email from pending or failed to submitting for this run; its own lock is kept.

        Safe to repeat: the holder finds its own lock. Bad input (unknown email, a filter that cannot
        be parsed, nobody to send to) fails before anything is written.
        """
        quota = await self.provider.account_quota()  # read before the row is locked; cached by the provider
        unverified = await self._unverified_sender(input.email_id)  # likewise: a request to the provider
        async with self.pool.acquire() as conn, conn.transaction():
            email = await conn.fetchrow(
                "SELECT e.status, e.locked_by, e.post_id, e.newsletter_id, e.recipient_filter, e.created_at, "
                "p.status AS post_status, n.status AS newsletter_status FROM emails e "
                "LEFT JOIN posts p ON p.id = e.post_id LEFT JOIN newsletters n ON n.id = e.newsletter_id "
                "WHERE e.id = $1 FOR UPDATE OF e", input.email_id)
            if email is None:
                raise non_retryable("EmailNotFound", f"email {input.email_id} does not exist")
            if email["status"] == "submitted":
                return EmailLock(acquired=False, reason=f"email {input.email_id} is already submitted")
            if email["status"] == "cancelled":
                return EmailLock(acquired=False, reason=f"email {input.email_id} was cancelled")
            refused = self._unpublished(email)
            if refused:
                # Failed with the reason, whoever held it: a send resumed or taken over after its post
                # was moved back to draft sends nothing more. Committed, then refused (below).
                await conn.execute("UPDATE emails SET status = 'failed', error = $2, locked_by = NULL, "
                                   "updated_at = now() WHERE id = $1", input.email_id, refused)
            else:
                try:
                    return await self._lock(conn, input, email, quota, unverified)
                except ApplicationError as error:
                    if error.type not in REFUSALS:
                        raise
                    # The email cannot be sent as it stands: failed with the reason (committed, then
                    # refused below), so `newsletter list`, `status` and `report` say why.
                    await conn.execute("UPDATE emails SET status = 'failed', error = $2, locked_by = NULL, "
                                       "updated_at = now() WHERE id = $1", input.email_id, error.message)
                    refusal = error
        if refused:
            raise non_retryable("PostNotPublished", refused)
        raise refusal

    @staticmethod
    def _unpublished(email: asyncpg.Record) -> str:
        """Why the email's post stops it (it is a draft or scheduled again), or "" when it may go out."""
        if email["post_status"] in (None, "published", "sent"):
            return ""
        return (f"The email is not sent: {unpublished(email['post_id'], email['post_status'])}. "
                "Publish the post again, then send it.")

    async def _unverified_sender(self, email_id: str) -> str:
        """Why the provider would refuse the email's sender (an identity it has not verified), or ""
        when it is verified, cannot be read now (an outage is waited out later), or is not valid
        (check_content refuses it with its own reason)."""
        try:
            async with self.pool.acquire() as conn:
                loaded = await load_email(conn, email_id, self.settings)
            if loaded is None or not loaded.from_address:  # no sender: check_content refuses it, naming it
                return ""
            state = await self.provider.sender_state(parseaddr(loaded.from_address)[1])
        except (ProviderError, ContentError):
            return ""
        if state.verified:
            return ""
        return (f"email {email_id}: {self.provider_title} has not verified {state.identity} for sending "
                f"({state.detail}); verify it with {self.provider_title} (docs/deliverability.md), then send again")

    async def _lock(self, conn: asyncpg.Connection, input: LockEmailInput, email: asyncpg.Record, quota: AccountQuota,
                    unverified: str = "") -> EmailLock:
        """The lock itself, in the caller's transaction: taken over from a sender proved gone, and
        refused for bad input before anything is written."""
        holder = self._holder(input.holder)
        took_over = ""
        if email["status"] == "submitting":
            if email["locked_by"] in (holder, input.holder):  # its own lock, in either stored form
                return EmailLock(acquired=True, post_id=email["post_id"], plan=self._plan(quota))
            took_over = await self._take_over(input.email_id, email["locked_by"])
        try:
            chosen = audience(email, as_of=await conn.fetchval("SELECT now()"), tiers=False)
        except FilterError as error:
            raise non_retryable("BadRecipientFilter", f"email {input.email_id}: {error}") from None
        absent = await missing(conn, chosen.tree)
        if absent:
            raise non_retryable("UnknownAudience", f"email {input.email_id}: recipient filter "
                                f"{email['recipient_filter'][:80]!r} names {absent}")
        if email["newsletter_id"] is None:
            raise non_retryable("NoNewsletter", f"email {input.email_id} has no newsletter to send to")
        if email["newsletter_status"] == "archived" and not took_over:  # a send under way finishes
            raise non_retryable("NewsletterArchived", f"{ARCHIVED_NEWSLETTER} (email {input.email_id}: newsletter "
                                f"{email['newsletter_id']} is archived)")
        await check_content(conn, input.email_id, self.settings)
        if unverified:
            raise non_retryable("UnverifiedSender", unverified)
        has_batches = await conn.fetchval("SELECT EXISTS (SELECT 1 FROM email_batches WHERE email_id = $1)",
                                          input.email_id)
        if not has_batches and not await conn.fetchval(
                chosen.sql(f"SELECT EXISTS (SELECT 1 {RECIPIENTS})"), *chosen.params):
            raise non_retryable("NoRecipients", f"email {input.email_id}: newsletter {email['newsletter_id']} "
                                f"has no subscribers matching {email['recipient_filter'][:80]!r}")
        await conn.execute(
            "UPDATE emails SET status = 'submitting', locked_by = $2, error = NULL, updated_at = now() "
            "WHERE id = $1", input.email_id, holder)
        activity.logger.info("locked email %s for sending", input.email_id)
        return EmailLock(acquired=True, reason=took_over, post_id=email["post_id"], plan=self._plan(quota))

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

        info = activity.info()
        namespace, workflow_id, run_id = lock_holder(locked_by, info.namespace, info.workflow_id)
        refused = f"email {email_id} is being sent by {locked_by}"
        if namespace != info.namespace or not workflow_id or not is_run_id(run_id):
            raise non_retryable("EmailLockedByAnotherSender",
                                f"{refused}, which cannot be checked from namespace {info.namespace}; "
                                "refusing to send it twice")
        latest = await self._describe(workflow_id)
        run = latest if latest is not None and run_id in (latest.run_id, latest.raw_info.first_run_id) \
            else await self._describe(workflow_id, run_id)
        if run is not None and run.status == WorkflowExecutionStatus.RUNNING:
            raise non_retryable("EmailLockedByAnotherSender",
                                f"{refused}, which is still running; refusing to send it twice")
        how = f"closed ({run.status.name.lower()})" if run is not None and run.status else \
            f"not found in namespace {info.namespace}"
        took_over = f"took over email {email_id} from {locked_by}, which is {how}"
        activity.logger.warning("%s", took_over)
        return took_over

    async def _describe(self, workflow_id: str, run_id: str | None = None) -> WorkflowExecutionDescription | None:
        """The run (the latest one without run_id), or None when this namespace has no such run."""

        try:
            return await self.temporal.get_workflow_handle(workflow_id, run_id=run_id).describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return None
            raise ApplicationError(f"cannot ask Temporal about {workflow_id}: {error.message}",
                                   type="TemporalUnavailable") from None

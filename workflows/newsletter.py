"""SendNewsletterWorkflow: one run per email sends it to every recipient exactly once.

It reads in the order of the work: take the status lock, create (or reuse) the batches, send them
with bounded concurrency, and mark the email submitted or failed. Temporal's retry policies
replace hand-written retry loops; the workflow id `newsletter-{email_id}` makes a second start find the first run.
Histories stay small for any list: batch ids come a page at a time and the run continues as new
when Temporal suggests it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from datetime import datetime, timedelta, timezone

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from pressroom.errors import cause_of
    from activities.newsletter.batches import BatchCreationActivities
    from activities.newsletter.finish import EmailFinishActivities
    from activities.newsletter.lock import EmailLockActivities
    from activities.newsletter.failures import (NOT_RETRIED, RECIPIENT_LIMIT_EXCEEDED, SENDING_LIMIT_REACHED,
                                                RecipientLimitDetails, SendFailure, SendingLimitDetails,
                                                read_send_failure)
    from activities.newsletter.models import (BatchCounts, BatchSent, CreateBatchesInput, EmailOutcome,
                                              FailBatchInput, FinishEmailInput, ListUnsentBatchesInput,
                                              LockEmailInput, SendBatchInput, SendPlan)
    from activities.newsletter.send import BatchSendActivities
    from activities.sending_limits import AdmitBatchInput, SendingLimitsActivities, SplitRefusedBatchInput
    from pressroom.temporal import EMAIL_ID, POST_ID
    from workflows.policies import DATABASE_RETRY

DATABASE_TIMEOUT = timedelta(minutes=30)
# Long activities heartbeat; a worker that dies is noticed this fast and its work retried elsewhere.
HEARTBEAT_TIMEOUT = timedelta(seconds=15)
BATCH_PAGE = 100  # batch ids fetched per page: a history holds a few pages at most
# Runs recorded before this patch resend an uncertain batch at once; later ones wait for its events.
CONFIRM_UNCERTAIN_PATCH = "confirm-uncertain-batches"
# Runs started before this patch send each batch as it is; later runs first admit it under the
# provider's limits (learned batch size, hourly and daily caps) and split a batch refused for its size.
PROVIDER_LIMITS_PATCH = "provider-limits"
# Runs started before this patch create every batch before sending any; later runs create them in
# chunks, sending the batches already written while the rest are created.
PIPELINED_BATCHES_PATCH = "pipelined-batches"
# Runs started before this patch fail a batch that the provider did not take after its retries (no
# connection, 429); later runs wait for it on a timer and send the batch when it is back. (Named
# when Mailgun was the only provider; the name is what histories hold.)
PROVIDER_OUTAGE_PATCH = "wait-out-mailgun-outages"
# Runs recorded before this patch had no `cancel` signal; later ones stop sending between batches
# when an operator cancels, and record the email cancelled.
CANCEL_PATCH = "operator-cancel"


NEWSLETTER_WORKFLOW_PREFIX = "newsletter-"


def provider_retry(plan: SendPlan, not_retried: list[str]) -> RetryPolicy:
    """A batch's send: the plan's attempts at its fixed pause, except for what retrying cannot help."""
    return RetryPolicy(initial_interval=timedelta(seconds=plan.provider_retry_seconds), backoff_coefficient=1.0,
                       maximum_attempts=plan.provider_retries + 1, non_retryable_error_types=not_retried)


def newsletter_workflow_id(email_id: str) -> str:
    return f"{NEWSLETTER_WORKFLOW_PREFIX}{email_id}"


class SendNewsletterInput(BaseModel):
    email_id: str
    resume: Resume | None = None  # set only when the run continues as new


class CancelSendInput(BaseModel):
    """Who cancels a send (`pressroom newsletter cancel`): an operator's name, as the CLI gives it."""

    by: str


class NewsletterProgress(BaseModel):
    """What the `progress` query answers: the CLI's progress bar and the Web UI read it."""

    email_id: str
    status: str = "starting"  # starting | sending | cancelling | submitted | failed | skipped | cancelled
    batches_total: int = 0
    batches_sent: int = 0
    batches_failed: int = 0
    recipients_total: int = 0
    recipients_sent: int = 0
    message: str = ""
    # Batches (numbered from 1) whose send may have reached the provider and which are being looked up
    # in its events, waiting for them to appear, before anything is sent again.
    confirming: list[int] = []


class Outage(BaseModel):
    """The provider unreachable: since when, how many waits so far, and when every sender tries next."""

    since: datetime
    waits: int = 0
    next_try: datetime | None = None


class Resume(BaseModel):
    """What a continued run carries over: the plan and the progress so far."""

    plan: SendPlan
    progress: NewsletterProgress
    started_at: float  # epoch seconds of the first run's start, for delivery-time spreading
    dispatched: int  # batches handed to the provider so far, for delivery-time spreading


SendNewsletterInput.model_rebuild()


@workflow.defn
class SendNewsletterWorkflow:
    def __init__(self) -> None:
        self._progress = NewsletterProgress(email_id="")
        self._within_limits = False
        self._creating = False  # batches are still being written, chunk by chunk
        self._chunks = 0  # chunks written so far: the send loop waits for the next one
        self._wait_out_outages = False
        self._outage: Outage | None = None  # the provider unreachable: since when, and when to try next
        self._provider = ""  # the provider's name, as the plan gives it, for what the run says
        self._cancel: FinishEmailInput | None = None  # an operator's cancel: no batch starts after it

    @workflow.signal
    def cancel(self, input: CancelSendInput) -> None:
        """Stop between batches: batches in flight finish, no other starts; safe to repeat."""
        if self._cancel is None and workflow.patched(CANCEL_PATCH):
            self._cancel = FinishEmailInput(email_id=self._progress.email_id, cancelled_by=input.by,
                                            cancelled_at=workflow.now())
            self._show(status="cancelling", message=f"cancelled by {input.by}: no batch starts after this")

    @workflow.query
    def progress(self) -> NewsletterProgress:
        return self._progress

    @workflow.run
    async def run(self, input: SendNewsletterInput) -> EmailOutcome:
        info = workflow.info()
        if info.workflow_id != newsletter_workflow_id(input.email_id):
            raise ApplicationError(f"a newsletter send must run as {newsletter_workflow_id(input.email_id)}, "
                                   f"not {info.workflow_id}: the id keeps it to one send", non_retryable=True)
        self._progress = NewsletterProgress(email_id=input.email_id)
        workflow.upsert_search_attributes([EMAIL_ID.value_set(input.email_id)])
        self._within_limits = workflow.patched(PROVIDER_LIMITS_PATCH)
        self._wait_out_outages = self._within_limits and workflow.patched(PROVIDER_OUTAGE_PATCH)

        creation: asyncio.Task | None = None
        resume = input.resume
        if resume is None:
            started = await self._lock_and_create(input.email_id)
            if isinstance(started, EmailOutcome):
                return started
            resume, creation = started
        self._progress = resume.progress
        self._provider = resume.plan.provider_title
        self._show(status="sending" if self._cancel is None else "cancelling")
        await self._send_all(input.email_id, resume, creation)

        finish = FinishEmailInput(email_id=input.email_id) if self._cancel is None else \
            self._cancel.model_copy(update={"email_id": input.email_id})
        outcome = await workflow.execute_activity_method(
            EmailFinishActivities.finish_email, finish,
            start_to_close_timeout=timedelta(seconds=60), retry_policy=DATABASE_RETRY)
        if outcome.counts:
            self._progress = self._from_counts(input.email_id, outcome.counts)
        self._show(status=outcome.status, message=outcome.message)
        return outcome

    async def _lock_and_create(self, email_id: str) -> EmailOutcome | tuple[Resume, asyncio.Task | None]:
        """Take the email's lock and write its first batches (all of them, or the first chunk with the
        rest written alongside the send); skipped when the email is already sent."""
        try:
            lock = await workflow.execute_activity_method(
                EmailLockActivities.lock_email,
                LockEmailInput(email_id=email_id, holder=workflow.info().first_execution_run_id),
                start_to_close_timeout=timedelta(seconds=60), retry_policy=DATABASE_RETRY)
        except ActivityError as error:
            # Bad input (unknown email, unparseable filter, nobody to send to): the run fails
            # with the reason itself, so the Web UI and the CLI show it in one line.
            reason = cause_of(error).message
            self._show(status="failed", message=reason)
            raise ApplicationError(reason, type="NewsletterRefused", non_retryable=True) from None
        if not lock.acquired:
            self._show(status="skipped", message=lock.reason)
            return EmailOutcome(email_id=email_id, status="skipped", message=lock.reason)
        if lock.post_id:
            workflow.upsert_search_attributes([POST_ID.value_set(lock.post_id)])
        chunked = workflow.patched(PIPELINED_BATCHES_PATCH)
        counts = await self._create_batches(email_id, retry_failed=True, chunked=chunked)
        resume = Resume(plan=lock.plan, progress=self._from_counts(email_id, counts),
                        started_at=workflow.now().timestamp(), dispatched=0)
        if not counts.creating:
            return resume, None
        self._creating = True
        return resume, asyncio.create_task(self._create_the_rest(email_id))

    async def _send_all(self, email_id: str, resume: Resume, creation: asyncio.Task | None) -> None:
        """Send the unsent batches a page at a time until none is left and none is being written;
        continue as new when Temporal suggests it (not while batches are still being written)."""
        while True:
            chunks = self._chunks
            batch_ids = await workflow.execute_activity_method(
                BatchSendActivities.list_unsent_batches, ListUnsentBatchesInput(email_id=email_id, limit=BATCH_PAGE),
                start_to_close_timeout=timedelta(seconds=60), retry_policy=DATABASE_RETRY)
            if self._cancel is not None:
                batch_ids = []  # cancelled: nothing more is sent (a chunk being written ends the creation)
            if not batch_ids:
                if self._creating and self._cancel is None:  # all written so far is sent: wait for the next chunk
                    await workflow.wait_condition(lambda: self._chunks != chunks or not self._creating
                                                  or self._cancel is not None)
                    continue
                if creation is not None:
                    await creation  # raises what stopped the creation, if anything did
                    creation = None
                    if self._chunks != chunks and self._cancel is None:
                        continue  # its last chunk was written after the listing
                return
            if self._within_limits:
                await self._send_page_within_limits(batch_ids, resume)
            else:
                await self._send_page(batch_ids, resume)
            if not self._creating and self._cancel is None and workflow.info().is_continue_as_new_suggested():
                resume.progress = self._progress
                workflow.continue_as_new(SendNewsletterInput(email_id=email_id, resume=resume))

    async def _create_batches(self, email_id: str, *, retry_failed: bool, chunked: bool) -> BatchCounts:
        return await workflow.execute_activity_method(
            BatchCreationActivities.create_batches,
            CreateBatchesInput(email_id=email_id, retry_failed=retry_failed, chunked=chunked),
            start_to_close_timeout=DATABASE_TIMEOUT, heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=DATABASE_RETRY, summary="create batches")

    async def _create_the_rest(self, email_id: str) -> None:
        """Write the remaining chunks one after another while the send loop sends what exists."""
        try:
            while True:
                counts = await self._create_batches(email_id, retry_failed=False, chunked=True)
                self._chunks += 1
                if self._cancel is not None:
                    return  # cancelled: the batches not written are not needed
                if not counts.creating:
                    # The totals were planned; now they are what was written.
                    self._progress.batches_total = counts.batches_total
                    self._progress.recipients_total = counts.recipients_total
                    self._show()
                    return
        finally:
            self._creating = False

    async def _send_page(self, batch_ids: list[str], resume: Resume) -> None:
        """Send a page of batches, at most `concurrency` at a time (runs from before provider limits)."""
        plan = resume.plan
        slots = asyncio.Semaphore(plan.concurrency)
        retry = provider_retry(plan, NOT_RETRIED)

        async def send(batch_id: str, number: int) -> None:
            async with slots:
                if self._cancel is not None:
                    return
                try:
                    sent = await workflow.execute_activity_method(
                        BatchSendActivities.send_batch,
                        SendBatchInput(batch_id=batch_id, delivery_time=self._delivery_time(number, resume)),
                        start_to_close_timeout=timedelta(minutes=2), heartbeat_timeout=HEARTBEAT_TIMEOUT,
                        retry_policy=retry, summary=f"batch {number + 1} of {self._progress.batches_total}")
                except ActivityError as error:
                    cause = cause_of(error)
                    await self._batch_failed(batch_id, read_send_failure(cause.type, cause.details).status_code,
                                             str(cause))
                else:
                    self._batch_sent(sent)

        first = resume.dispatched
        resume.dispatched += len(batch_ids)
        await asyncio.gather(*(send(batch_id, first + n) for n, batch_id in enumerate(batch_ids)))

    async def _send_page_within_limits(self, batch_ids: list[str], resume: Resume) -> None:
        """Send a page of batches, at most `concurrency` at a time, each admitted under the send caps
        first when there are any; a batch split into smaller ones (refused for its size, or too large
        for the room left under a cap) puts its pieces at the front of the queue."""
        plan = resume.plan
        queue = deque((batch_id, resume.dispatched + n) for n, batch_id in enumerate(batch_ids))
        resume.dispatched += len(batch_ids)

        async def sender() -> None:
            while queue and self._cancel is None:
                batch_id, number = queue.popleft()
                pieces = await self._admit_and_send(batch_id, number, resume)
                queue.extendleft((piece, number) for piece in reversed(pieces))

        await asyncio.gather(*(sender() for _ in range(min(plan.concurrency, len(queue)))))

    async def _admit_and_send(self, batch_id: str, number: int, resume: Resume) -> list[str]:
        """Send one batch once it is admitted; the batches to send instead: smaller ones if it was
        split, itself again after a wait."""
        pieces = await self._admit(batch_id, resume.plan)
        if pieces:
            return pieces
        # Whether this run may wait for an uncertain batch's events on a timer (runs recorded before
        # the patch cannot: their histories have no such timer).
        batch = SendBatchInput(batch_id=batch_id, delivery_time=self._delivery_time(number, resume, at_most_end=True),
                               may_wait_to_confirm=workflow.patched(CONFIRM_UNCERTAIN_PATCH))
        try:
            sent = await self._send_and_confirm(batch, number, resume.plan)
        except ActivityError as error:
            cause = cause_of(error)
            return await self._after_failure(batch_id, read_send_failure(cause.type, cause.details), str(cause),
                                             resume.plan)
        self._batch_sent(sent)
        return []

    async def _admit(self, batch_id: str, plan: SendPlan) -> list[str]:
        """With send caps, wait on durable timers until the batch is admitted; the smaller batches
        to send instead when admission split it, else nothing."""
        while plan.send_caps:
            admission = await workflow.execute_activity_method(
                SendingLimitsActivities.admit_batch, AdmitBatchInput(batch_id=batch_id, at=workflow.now()),
                start_to_close_timeout=timedelta(seconds=60), retry_policy=DATABASE_RETRY)
            if admission.split_into:
                self._progress.batches_total += len(admission.split_into) - 1
                self._show()
                return admission.split_into
            if admission.send:
                break
            # A cap is reached: wait on a durable timer for the next window, not on failing retries.
            self._show(message=admission.reason)
            await self._wait_unless_cancelled(max(admission.resume_at - workflow.now(), timedelta(seconds=1)),
                                              admission.reason)
            if self._cancel is not None:
                return [batch_id]  # back in the queue, which a cancelled send no longer reads
        if self._progress.message.startswith("waiting for"):
            self._show(message="")
        return []

    async def _send_and_confirm(self, batch: SendBatchInput, number: int, plan: SendPlan) -> BatchSent:
        """Send the batch; while the provider may have accepted it and its events are not there yet,
        look again after the wait the activity names."""
        retry = provider_retry(plan, [*NOT_RETRIED, RECIPIENT_LIMIT_EXCEEDED, SENDING_LIMIT_REACHED])

        async def attempt() -> BatchSent:
            return await workflow.execute_activity_method(
                BatchSendActivities.send_batch, batch, start_to_close_timeout=timedelta(minutes=2),
                heartbeat_timeout=HEARTBEAT_TIMEOUT, retry_policy=retry, summary=f"batch {batch.batch_id}")

        sent = await attempt()
        while sent.confirm_in_seconds is not None:
            self._progress.confirming.append(number + 1)
            self._show()
            await workflow.sleep(timedelta(seconds=sent.confirm_in_seconds), summary=f"confirming batch {number + 1}")
            self._progress.confirming.remove(number + 1)
            sent = await attempt()
        return sent

    async def _after_failure(self, batch_id: str, failure: SendFailure, message: str, plan: SendPlan) -> list[str]:
        """A batch not sent after its retries: wait for a cap's window or the provider's return and
        send it again, split it when refused for its size, or record it failed."""
        if isinstance(failure.details, SendingLimitDetails):
            # The provider refused it and named when to come back (its own hourly or daily cap):
            # wait on a timer as long as it asks, then send the batch again.
            wait = failure.details.retry_after_seconds or plan.provider_retry_seconds
            resume_at = workflow.now() + timedelta(seconds=max(1.0, wait))
            reason = f"waiting for {self._provider}'s sending limit, resumes at {resume_at:%Y-%m-%d %H:%M:%S} UTC"
            self._show(message=reason)
            await self._wait_unless_cancelled(resume_at - workflow.now(), reason)
            return [batch_id]
        if self._wait_out_outages and failure.outage:
            await self._wait_for_provider(plan, message)
            return [batch_id]
        if isinstance(failure.details, RecipientLimitDetails):
            pieces = await workflow.execute_activity_method(
                SendingLimitsActivities.split_refused_batch,
                SplitRefusedBatchInput(batch_id=batch_id, status_code=failure.status_code, message=message,
                                       refused_size=failure.details.refused_size,
                                       stated_limit=failure.details.stated_limit),
                start_to_close_timeout=timedelta(seconds=60), retry_policy=DATABASE_RETRY)
            if pieces:
                self._progress.batches_total += len(pieces) - 1
                self._show()
                return pieces
        await self._batch_failed(batch_id, failure.status_code, message)
        return []

    def _delivery_time(self, number: int, resume: Resume, *, at_most_end: bool = False) -> datetime | None:
        """When the provider should deliver batch `number`: spread over the plan's delivery window."""
        plan = resume.plan
        if not plan.delivery_window_seconds or not self._progress.batches_total:
            return None
        share = number / self._progress.batches_total
        if at_most_end:
            share = min(1.0, share)
        return datetime.fromtimestamp(resume.started_at + plan.delivery_window_seconds * share, timezone.utc)

    async def _batch_failed(self, batch_id: str, status_code: int | None, message: str) -> None:
        await workflow.execute_activity_method(
            BatchSendActivities.fail_batch,
            FailBatchInput(batch_id=batch_id, status_code=status_code, message=message),
            start_to_close_timeout=timedelta(seconds=60), retry_policy=DATABASE_RETRY)
        self._progress.batches_failed += 1
        self._show()

    async def _wait_for_provider(self, plan: SendPlan, error: str) -> None:
        """The provider cannot be reached (or asks to slow down) after the batch's retries: an outage, not
        a verdict on the batch. Wait on a durable timer, from the first wait doubling to the longest;
        every sender waits for the same next try, then the batch goes out as any other would."""
        now = workflow.now()
        outage = self._outage or Outage(since=now)
        if outage.next_try is None or outage.next_try <= now:
            wait = min(plan.outage_first_wait_seconds * 2 ** outage.waits, plan.outage_max_wait_seconds)
            outage = Outage(since=outage.since, waits=outage.waits + 1, next_try=now + timedelta(seconds=wait))
        self._outage = outage
        reason = (f"{self._provider} unreachable since {outage.since:%Y-%m-%d %H:%M:%S} UTC, next try at "
                  f"{outage.next_try:%Y-%m-%d %H:%M:%S} UTC ({error})")
        self._show(message=reason)
        await self._wait_unless_cancelled(max(outage.next_try - now, timedelta(seconds=1)), reason[:200])

    async def _wait_unless_cancelled(self, duration: timedelta, summary: str) -> None:
        """A durable wait (a cap's window, the provider's return) that an operator's cancel ends at
        once: waits last hours, and nothing is sent after a cancel anyway."""
        if not workflow.patched(CANCEL_PATCH):  # runs recorded before the patch slept on a plain timer
            await workflow.sleep(duration, summary=summary)
            return
        try:
            await workflow.wait_condition(lambda: self._cancel is not None, timeout=duration, timeout_summary=summary)
        except asyncio.TimeoutError:
            pass

    def _batch_sent(self, sent: BatchSent) -> None:
        if self._outage is not None:  # the provider is back
            self._outage = None
            if self._progress.message.startswith(f"{self._provider} unreachable"):
                self._progress.message = ""
        self._progress.batches_sent += 1
        self._progress.recipients_sent += sent.recipients
        self._show()

    @staticmethod
    def _from_counts(email_id: str, counts: BatchCounts) -> NewsletterProgress:
        return NewsletterProgress(email_id=email_id, batches_total=counts.batches_total,
                                  batches_sent=counts.batches_submitted, batches_failed=counts.batches_failed,
                                  recipients_total=counts.recipients_total,
                                  recipients_sent=counts.recipients_submitted)

    def _show(self, *, status: str | None = None, message: str | None = None) -> None:
        """Update the progress and the Web UI's "current details" line."""
        p = self._progress
        if status is not None:
            p.status = status
        if message is not None:
            p.message = message
        details = (f"**{p.status}**: {p.batches_sent}/{p.batches_total} batches sent, {p.batches_failed} failed; "
                   f"{p.recipients_sent}/{p.recipients_total} recipients")
        if p.confirming:
            details += (f"\n\nconfirming batch {', '.join(map(str, sorted(p.confirming)))}: {self._provider} may "
                        "have accepted it; waiting for its events before sending it again")
        workflow.set_current_details(f"{details}\n\n{p.message}" if p.message else details)

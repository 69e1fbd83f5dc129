"""SendNewsletterWorkflow: one run per email sends it to every recipient exactly once.

It reads in the order of the work: take the status lock, create (or reuse) the batches, send them
with bounded concurrency, and mark the email submitted or failed. Temporal's retry policies
replace hand-written retry loops; the workflow id `newsletter-{email_id}` makes a second start find the first run.
Histories stay small for any list: batch ids come a page at a time and the run continues as new
when Temporal suggests it.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from activities.newsletter.batches import BatchCreationActivities
    from activities.newsletter.failures import read_send_failure
    from activities.newsletter.finish import EmailFinishActivities
    from activities.newsletter.lock import EmailLockActivities
    from activities.newsletter.models import (
        BatchCounts,
        CreateBatchesInput,
        EmailLock,
        EmailOutcome,
        FinishEmailInput,
        ListUnsentBatchesInput,
        LockEmailInput,
        SendBatchInput,
        SendPlan,
    )
    from activities.newsletter.send import BatchSendActivities
    from pressroom.errors import cause_of
    from pressroom.temporal import EMAIL_ID, POST_ID
    from workflows.policies import DATABASE_RETRY


from workflows import newsletter_sending
from workflows.newsletter_models import (
    CancelSendInput,
    NewsletterProgress,
    Outage,
    ReputationWatch,
    Resume,
    ResumePausedInput,
    SendNewsletterInput,
    newsletter_workflow_id,
)
from workflows.newsletter_sending import BatchSending, heartbeat_timeout

DATABASE_TIMEOUT = timedelta(minutes=30)
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
# Runs recorded before this patch heard a cancel only once the lock was taken; later ones stop a lock
# that is being retried (a database that does not answer) and record the email cancelled.
CANCEL_WHILE_LOCKING_PATCH = "cancel-while-locking"
# Runs started before this patch held a sender while an uncertain batch waited for its events; later
# runs confirm it aside, on its own timers, while the other batches go out.
CONFIRM_ASIDE_PATCH = "confirm-uncertain-aside"
# Runs started before this patch sent to the end whatever their early figures; later runs pause
# between batches when the email's hard-bounce or complaint rate crosses its threshold.
REPUTATION_PAUSE_PATCH = "pause-on-reputation"
# Runs started before this patch sent each batch with an activity of its own; later runs send
# several at once with one activity (fewer activities and workflow tasks), and each batch that group
# did not settle on its own as before.
SEND_GROUPS_PATCH = "several-batches-per-send"


@workflow.defn
class SendNewsletterWorkflow(BatchSending):
    def __init__(self) -> None:
        self._progress = NewsletterProgress(email_id="")
        self._within_limits = False
        self._creating = False  # batches are still being written, chunk by chunk
        self._chunks = 0  # chunks written so far: the send loop waits for the next one
        self._wait_out_outages = False
        self._outage: Outage | None = None  # the provider unreachable: since when, and when to try next
        self._provider = ""  # the provider's name, as the plan gives it, for what the run says
        self._cancellable_lock = False  # a cancel stops the lock (CANCEL_WHILE_LOCKING_PATCH)
        self._cancel: FinishEmailInput | None = None  # an operator's cancel: no batch starts after it
        self._aside: list[asyncio.Task] = []  # uncertain batches being confirmed while the others go out
        self._confirms_aside = False  # decided once per run: runs from before the patch hold a sender
        self._sends_groups = False  # decided once per run: runs from before the patch send a batch per activity
        self._looks_for_room = False  # decided once per run: runs from before the patch wait out a used-up quota
        self._probe: asyncio.Task | None = None  # the look for the provider's return every sender waits on
        self._paused: str | None = None  # why the send is paused for its rates, until an operator resumes it
        self._reputation = ReputationWatch()
        self._pause_to_clear = False  # resumed: the email's row still says paused
        self._resume: Resume | None = None

    @workflow.signal
    def cancel(self, input: CancelSendInput) -> None:
        """Stop between batches: batches in flight finish, no other starts; safe to repeat."""
        if self._cancel is None and workflow.patched(CANCEL_PATCH):
            self._cancel = FinishEmailInput(email_id=self._progress.email_id, cancelled_by=input.by,
                                            cancelled_at=workflow.now())
            self._show(status="cancelling", message=f"cancelled by {input.by}: no batch starts after this")

    @workflow.signal
    def resume_paused(self, input: ResumePausedInput) -> None:
        """Go on with a send paused for its rates; it is not paused for them again. Safe to repeat."""
        self._reputation.watching = False
        if self._resume is not None:
            self._resume.pause_overridden = True
        if self._paused is not None:
            self._paused = None
            self._pause_to_clear = True
            self._show(status="sending", message=f"resumed by {input.by}")

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
        self._resume = resume
        self._reputation.watching = not resume.pause_overridden and self._paused is None \
            and workflow.patched(REPUTATION_PAUSE_PATCH)
        self._confirms_aside = workflow.patched(CONFIRM_ASIDE_PATCH)
        self._sends_groups = workflow.patched(SEND_GROUPS_PATCH)
        self._looks_for_room = workflow.patched(newsletter_sending.ACCOUNT_ROOM_PATCH)
        self._show(status="sending" if self._cancel is None else "cancelling")
        await self._send_all(input.email_id, resume, creation)

        finish = FinishEmailInput(email_id=input.email_id) if self._cancel is None else \
            self._cancel.model_copy(update={"email_id": input.email_id})
        outcome = await workflow.execute_activity_method(
            EmailFinishActivities.finish_email, finish,
            start_to_close_timeout=timedelta(seconds=60), heartbeat_timeout=heartbeat_timeout(resume.plan),
            retry_policy=DATABASE_RETRY)
        if outcome.counts:
            self._progress = self._from_counts(input.email_id, outcome.counts)
        self._show(status=outcome.status, message=outcome.message)
        return outcome

    async def _lock_and_create(self, email_id: str) -> EmailOutcome | tuple[Resume, asyncio.Task | None]:
        """Take the email's lock and write its first batches (all of them, or the first chunk with the
        rest written alongside the send); skipped when the email is already sent."""
        try:
            lock = await self._lock(email_id)
        except ActivityError as error:
            if self._cancel is not None and isinstance(error.cause, CancelledError):
                return await self._cancelled_before_any_batch(email_id)
            # Bad input (unknown email, unparseable filter, nobody to send to): the run fails
            # with the reason itself, so the Web UI and the CLI show it in one line.
            reason = cause_of(error).message
            self._show(status="failed", message=reason)
            raise ApplicationError(reason, type="NewsletterRefused", non_retryable=True) from None
        if not lock.acquired:
            self._show(status="skipped", message=lock.reason)
            return EmailOutcome(email_id=email_id, status="skipped", message=lock.reason)
        if self._cancel is not None and self._cancellable_lock:  # cancelled while it was taken: no batch is written
            return await self._cancelled_before_any_batch(email_id)
        if lock.post_id:
            workflow.upsert_search_attributes([POST_ID.value_set(lock.post_id)])
        assert lock.plan is not None  # an acquired lock always carries the plan
        chunked = workflow.patched(PIPELINED_BATCHES_PATCH)
        counts = await self._create_batches(email_id, lock.plan, retry_failed=True, chunked=chunked)
        resume = Resume(plan=lock.plan, progress=self._from_counts(email_id, counts),
                        started_at=workflow.now().timestamp(), dispatched=0)
        if not counts.creating:
            return resume, None
        self._creating = True
        return resume, asyncio.create_task(self._create_the_rest(email_id, resume.plan))

    async def _lock(self, email_id: str) -> EmailLock:
        """The lock activity; an operator's cancel stops it while it is being retried."""
        lock_input = LockEmailInput(email_id=email_id, holder=workflow.info().first_execution_run_id)
        self._cancellable_lock = workflow.patched(CANCEL_WHILE_LOCKING_PATCH)
        if not self._cancellable_lock:
            return await workflow.execute_activity_method(
                EmailLockActivities.lock_email, lock_input, start_to_close_timeout=timedelta(seconds=60),
                retry_policy=DATABASE_RETRY)
        # Waiting for the attempt in progress to end: a lock it commits is then released by the finish.
        locking = asyncio.ensure_future(workflow.execute_activity_method(
            EmailLockActivities.lock_email, lock_input, start_to_close_timeout=timedelta(seconds=60),
            retry_policy=DATABASE_RETRY, cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED))
        await workflow.wait_condition(lambda: locking.done() or self._cancel is not None)
        if not locking.done():
            locking.cancel()
        return await locking

    async def _cancelled_before_any_batch(self, email_id: str) -> EmailOutcome:
        assert self._cancel is not None
        outcome = await workflow.execute_activity_method(
            EmailFinishActivities.finish_email, self._cancel.model_copy(update={"email_id": email_id}),
            start_to_close_timeout=timedelta(seconds=60), retry_policy=DATABASE_RETRY)
        self._show(status=outcome.status, message=outcome.message)
        return outcome

    async def _send_all(self, email_id: str, resume: Resume, creation: asyncio.Task | None) -> None:
        """Send the unsent batches a page at a time until none is left and none is being written;
        continue as new when Temporal suggests it (not while batches are still being written)."""
        while True:
            chunks = self._chunks
            batch_ids = await workflow.execute_activity_method(
                BatchSendActivities.list_unsent_batches, ListUnsentBatchesInput(email_id=email_id, limit=BATCH_PAGE),
                start_to_close_timeout=timedelta(seconds=60), heartbeat_timeout=heartbeat_timeout(resume.plan),
                retry_policy=DATABASE_RETRY)
            if self._cancel is not None:
                batch_ids = []  # cancelled: nothing more is sent (a chunk being written ends the creation)
            if not batch_ids:
                if self._creating and self._cancel is None:  # all written so far is sent: wait for the next chunk
                    await workflow.wait_condition(  # the condition is read only while this iteration waits
                        lambda: self._chunks != chunks or not self._creating or self._cancel is not None)  # noqa: B023 (read only while this iteration waits)
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

    async def _create_batches(self, email_id: str, plan: SendPlan, *, retry_failed: bool, chunked: bool) -> BatchCounts:
        return await workflow.execute_activity_method(
            BatchCreationActivities.create_batches,
            CreateBatchesInput(email_id=email_id, retry_failed=retry_failed, chunked=chunked),
            start_to_close_timeout=DATABASE_TIMEOUT, heartbeat_timeout=heartbeat_timeout(plan),
            retry_policy=DATABASE_RETRY, summary="create batches")

    async def _create_the_rest(self, email_id: str, plan: SendPlan) -> None:
        """Write the remaining chunks one after another while the send loop sends what exists."""
        try:
            while True:
                counts = await self._create_batches(email_id, plan, retry_failed=False, chunked=True)
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
            sent = await self._send_and_confirm(batch, number, resume)
        except ActivityError as error:
            cause = cause_of(error)
            return await self._after_failure(batch_id, read_send_failure(cause.type, cause.details), str(cause),
                                             resume.plan)
        if sent is not None:  # None: uncertain, confirmed aside
            self._batch_sent(sent)
        return []

    async def _wait_unless_cancelled(self, duration: timedelta, summary: str) -> None:
        """A durable wait (a cap's window, the provider's return) that an operator's cancel ends at
        once: waits last hours, and nothing is sent after a cancel anyway."""
        if not workflow.patched(CANCEL_PATCH):  # runs recorded before the patch slept on a plain timer
            await workflow.sleep(duration, summary=summary)
            return
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(lambda: self._cancel is not None, timeout=duration, timeout_summary=summary)

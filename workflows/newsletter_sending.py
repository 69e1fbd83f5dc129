"""How SendNewsletterWorkflow sends its batches: admitted under the caps, confirmed when uncertain,
waiting out a provider's outage, and what the run shows while it does."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.newsletter.failures import (
        NOT_RETRIED,
        RECIPIENT_LIMIT_EXCEEDED,
        SENDING_LIMIT_REACHED,
        RecipientLimitDetails,
        SendFailure,
        SendingLimitDetails,
        read_send_failure,
    )
    from activities.newsletter.models import (
        BatchCounts,
        BatchSent,
        FailBatchInput,
        FinishEmailInput,
        SendBatchInput,
        SendPlan,
    )
    from activities.newsletter.send import BatchSendActivities
    from activities.sending_limits import AdmitBatchInput, SendingLimitsActivities, SplitRefusedBatchInput
    from pressroom.errors import cause_of
    from workflows.newsletter_models import NewsletterProgress, Outage, Resume
    from workflows.policies import DATABASE_RETRY


# Long activities heartbeat; a worker that dies is noticed this fast and its work retried elsewhere.
HEARTBEAT_TIMEOUT = timedelta(seconds=15)


def provider_retry(plan: SendPlan, not_retried: list[str]) -> RetryPolicy:
    """A batch's send: the plan's attempts at its fixed pause, except for what retrying cannot help."""
    return RetryPolicy(initial_interval=timedelta(seconds=plan.provider_retry_seconds), backoff_coefficient=1.0,
                       maximum_attempts=plan.provider_retries + 1, non_retryable_error_types=not_retried)



class BatchSending:
    """The batch-sending half of SendNewsletterWorkflow, which holds the state these read (`_progress`,
    `_cancel`, `_outage`, `_provider`) and the steps that depend on its patches (`_admit_and_send`,
    `_wait_unless_cancelled`)."""

    # Declared for the type checker; SendNewsletterWorkflow sets and defines them.
    _progress: NewsletterProgress
    _cancel: FinishEmailInput | None
    _outage: Outage | None
    _provider: str
    _wait_out_outages: bool
    _admit_and_send: Callable[[str, int, Resume], Awaitable[list[str]]]
    _wait_unless_cancelled: Callable[[timedelta, str], Awaitable[None]]

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
            resume_at = admission.resume_at or workflow.now()  # a refusal always names when; never sooner
            await self._wait_unless_cancelled(max(resume_at - workflow.now(), timedelta(seconds=1)), admission.reason)
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
        return datetime.fromtimestamp(resume.started_at + plan.delivery_window_seconds * share, UTC)

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
        next_try = outage.next_try
        if next_try is None or next_try <= now:
            wait = min(plan.outage_first_wait_seconds * 2 ** outage.waits, plan.outage_max_wait_seconds)
            next_try = now + timedelta(seconds=wait)
            outage = Outage(since=outage.since, waits=outage.waits + 1, next_try=next_try)
        self._outage = outage
        reason = (f"{self._provider} unreachable since {outage.since:%Y-%m-%d %H:%M:%S} UTC, next try at "
                  f"{next_try:%Y-%m-%d %H:%M:%S} UTC ({error})")
        self._show(message=reason)
        await self._wait_unless_cancelled(max(next_try - now, timedelta(seconds=1)), reason[:200])

    def _batch_sent(self, sent: BatchSent) -> None:
        if self._outage is not None:  # the provider is back
            self._outage = None
            if self._progress.message.startswith(f"{self._provider} unreachable"):
                self._progress.message = ""
        self._progress.batches_sent += 1
        self._progress.batches_total += sent.requeued  # recipients refused for the moment, in a new batch
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

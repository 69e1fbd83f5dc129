"""How SendNewsletterWorkflow sends its batches: admitted under the caps, confirmed when uncertain,
waiting out a provider's outage, and what the run shows while it does."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.account_quota import AccountQuotaActivities, LookForAccountRoomInput
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
        BatchesSent,
        BatchSent,
        FailBatchInput,
        FinishEmailInput,
        ProbeProviderInput,
        ReadReputationInput,
        RecordPauseInput,
        SendBatchesInput,
        SendBatchInput,
        SendPlan,
    )
    from activities.newsletter.reputation import ReputationActivities
    from activities.newsletter.send import BatchSendActivities
    from activities.sending_limits import AdmitBatchInput, SendingLimitsActivities, SplitRefusedBatchInput
    from pressroom.errors import cause_of
    from workflows.newsletter_models import NewsletterProgress, Outage, ReputationWatch, Resume
    from workflows.policies import DATABASE_RETRY


# Long activities heartbeat; a worker that dies is noticed within the plan's heartbeat timeout and its
# work retried elsewhere. Plans stored without one (runs started before the setting) keep this.
HEARTBEAT_TIMEOUT = timedelta(seconds=15)
# Runs started before this patch waited out an outage on a doubling timer; later runs look for the
# provider's return with an authenticated read and send again within one look of it.
PROVIDER_PROBE_PATCH = "probe-provider-return"
# Runs started before this patch looked at a used-up rolling day's quota (SES) again within the hour;
# later runs also read the quota while they wait and go on within one look of it having room.
ACCOUNT_ROOM_PATCH = "look-for-account-room"
# A group of batches sent by one activity holds at most half the plan's senders, so that the batches
# of another group go out while one waits for its slowest answer.
GROUP_SHARE_OF_SENDERS = 2
# A look for the provider's return lasts at most this long; the run then looks again.
PROBE_ACTIVITY = timedelta(minutes=10)


def heartbeat_timeout(plan: SendPlan) -> timedelta:
    """How long the send's long activities may go without a heartbeat (`send_heartbeat_seconds`)."""
    return timedelta(seconds=plan.heartbeat_seconds) if plan.heartbeat_seconds else HEARTBEAT_TIMEOUT


def provider_retry(plan: SendPlan, not_retried: list[str]) -> RetryPolicy:
    """A batch's send: the plan's attempts at its fixed pause, except for what retrying cannot help."""
    return RetryPolicy(initial_interval=timedelta(seconds=plan.provider_retry_seconds), backoff_coefficient=1.0,
                       maximum_attempts=plan.provider_retries + 1, non_retryable_error_types=not_retried)



@dataclass
class Slots:
    """How many more batches may be in flight (`SendPlan.concurrency` less those being sent)."""

    free: int


class BatchSending:
    """The batch-sending half of SendNewsletterWorkflow, which holds the state these read (`_progress`,
    `_cancel`, `_outage`, `_provider`, `_aside`, `_paused`, `_reputation`) and the steps that depend on
    its patches (`_admit_and_send`, `_wait_unless_cancelled`)."""

    # Declared for the type checker; SendNewsletterWorkflow sets and defines them.
    _progress: NewsletterProgress
    _cancel: FinishEmailInput | None
    _outage: Outage | None
    _provider: str
    _wait_out_outages: bool
    _aside: list[asyncio.Task]
    _confirms_aside: bool
    _sends_groups: bool
    _looks_for_room: bool
    _probe: asyncio.Task | None
    _paused: str | None
    _pause_to_clear: bool
    _reputation: ReputationWatch
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
                        start_to_close_timeout=timedelta(minutes=2), heartbeat_timeout=heartbeat_timeout(plan),
                        retry_policy=retry, summary=f"batch {number + 1} of {self._progress.batches_total}")
                except ActivityError as error:
                    cause = cause_of(error)
                    await self._batch_failed(batch_id, read_send_failure(cause.type, cause.details).status_code,
                                             str(cause), plan)
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
        if self._sends_groups and not plan.send_caps:  # with caps, each batch is admitted on its own
            await self._send_in_groups(queue, resume)
            await self._confirmed_aside()
            return

        async def sender() -> None:
            while queue and self._cancel is None:
                await self._hold_while_paused(plan)
                if not queue or self._cancel is not None:
                    break
                batch_id, number = queue.popleft()
                pieces = await self._admit_and_send(batch_id, number, resume)
                queue.extendleft((piece, number) for piece in reversed(pieces))
                await self._watch_reputation(plan)

        await asyncio.gather(*(sender() for _ in range(min(plan.concurrency, len(queue)))))
        await self._confirmed_aside()

    async def _confirmed_aside(self) -> None:
        while self._aside:  # uncertain batches confirmed aside; one may hand back pieces that do the same
            confirming, self._aside = self._aside, []
            await asyncio.gather(*confirming)

    async def _send_in_groups(self, queue: deque[tuple[str, int]], resume: Resume) -> None:
        """Send the queue's batches several to an activity, never more than `concurrency` in flight;
        between groups, a pause holds and a cancel stops, as between batches."""
        plan = resume.plan
        slots = Slots(free=plan.concurrency)
        largest = max(1, plan.concurrency // GROUP_SHARE_OF_SENDERS)
        groups: list[asyncio.Task] = []
        while queue and self._cancel is None:
            await workflow.wait_condition(lambda: slots.free > 0 or self._cancel is not None)
            await self._hold_while_paused(plan)
            if self._cancel is not None:
                break
            group = [queue.popleft() for _ in range(min(slots.free, largest, len(queue)))]
            slots.free -= len(group)
            groups.append(asyncio.create_task(self._send_group(group, resume, slots)))
        await asyncio.gather(*groups)

    async def _send_group(self, group: list[tuple[str, int]], resume: Resume, slots: Slots) -> None:
        """One activity sends the group's batches; each it did not settle (an error, an uncertain send,
        a wait to hold) is then sent on its own, with its retries, look-ups and waits, as before."""
        alone = [batch_id for batch_id, _ in group]
        if len(group) > 1:
            batches = [SendBatchInput(batch_id=batch_id, may_wait_to_confirm=True,
                                      delivery_time=self._delivery_time(number, resume, at_most_end=True))
                       for batch_id, number in group]
            try:
                answer: BatchesSent = await workflow.execute_activity_method(
                    BatchSendActivities.send_batches, SendBatchesInput(batches=batches),
                    start_to_close_timeout=timedelta(minutes=2), heartbeat_timeout=heartbeat_timeout(resume.plan),
                    # Not retried whole: each batch left unsettled by a failed call is sent on its own.
                    retry_policy=RetryPolicy(maximum_attempts=1),
                    summary=f"batches {group[0][1] + 1}-{group[-1][1] + 1}")
                alone = answer.alone
                for sent in answer.sent:
                    self._batch_sent(sent)
            except ActivityError:  # a worker lost mid-call: every batch is looked at again, alone
                pass
        if len(alone) < len(group):  # read the rates before the next batches go, as a sender does
            await self._watch_reputation(resume.plan)
        slots.free += len(group) - len(alone)

        async def on_its_own(batch_id: str, number: int) -> None:
            try:
                await self._send_to_the_end(batch_id, number, resume)
                await self._watch_reputation(resume.plan)
            finally:
                slots.free += 1

        numbers = dict(group)
        await asyncio.gather(*(on_its_own(batch_id, numbers[batch_id]) for batch_id in alone))

    async def _admit(self, batch_id: str, plan: SendPlan) -> list[str]:
        """With send caps, wait on durable timers until the batch is admitted; the smaller batches
        to send instead when admission split it, else nothing."""
        while plan.send_caps:
            admission = await workflow.execute_activity_method(
                SendingLimitsActivities.admit_batch, AdmitBatchInput(batch_id=batch_id, at=workflow.now()),
                start_to_close_timeout=timedelta(seconds=60), heartbeat_timeout=heartbeat_timeout(plan),
                retry_policy=DATABASE_RETRY)
            if admission.split_into:
                self._progress.batches_total += len(admission.split_into) - 1
                self._show()
                return admission.split_into
            if admission.send:
                break
            # A cap is reached: wait on a durable timer for the next window, not on failing retries.
            self._show(message=admission.reason)
            resume_at = admission.resume_at or workflow.now()  # a refusal always names when; never sooner
            wait = max(resume_at - workflow.now(), timedelta(seconds=1))
            if admission.account and self._looks_for_room:
                await self._wait_for_account_room(plan, wait, admission.reason)
            else:
                await self._wait_unless_cancelled(wait, admission.reason)
            if self._cancel is not None:
                return [batch_id]  # back in the queue, which a cancelled send no longer reads
        if self._progress.message.startswith("waiting for"):
            self._show(message="")
        return []

    async def _wait_for_account_room(self, plan: SendPlan, wait: timedelta, reason: str) -> None:
        """A used-up rolling day's quota: wait until the admission looks again, or less, within one look
        (`provider_probe_seconds`) of the account having room (a raised quota), or until a cancel."""
        look = asyncio.create_task(self._look_for_account_room(plan))
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(lambda: look.done() or self._cancel is not None, timeout=wait,
                                          timeout_summary=reason)
        if not look.done():
            look.cancel()

    async def _look_for_account_room(self, plan: SendPlan) -> None:
        while True:
            found = await workflow.execute_activity_method(
                AccountQuotaActivities.look_for_account_room,
                LookForAccountRoomInput(every_seconds=plan.provider_probe_seconds,
                                        at_most_seconds=PROBE_ACTIVITY.total_seconds() - 30),
                start_to_close_timeout=PROBE_ACTIVITY, heartbeat_timeout=heartbeat_timeout(plan),
                retry_policy=DATABASE_RETRY, summary="look for room in the provider's quota")
            if found.room:
                return

    async def _send_and_confirm(self, batch: SendBatchInput, number: int, resume: Resume) -> BatchSent | None:
        """Send the batch; while the provider may have accepted it and its events are not there yet,
        look again after the wait the activity names: aside (None here) so that the sender goes on,
        or holding the sender (runs from before workflows/newsletter.py's CONFIRM_ASIDE_PATCH)."""
        sent = await self._attempt(batch, resume.plan)
        if sent.confirm_in_seconds is not None and self._confirms_aside:
            self._aside.append(asyncio.create_task(self._confirm_aside(batch, number, sent, resume)))
            return None
        return await self._confirm(batch, number, resume.plan, sent)

    async def _attempt(self, batch: SendBatchInput, plan: SendPlan) -> BatchSent:
        retry = provider_retry(plan, [*NOT_RETRIED, RECIPIENT_LIMIT_EXCEEDED, SENDING_LIMIT_REACHED])
        return await workflow.execute_activity_method(
            BatchSendActivities.send_batch, batch, start_to_close_timeout=timedelta(minutes=2),
            heartbeat_timeout=heartbeat_timeout(plan), retry_policy=retry, summary=f"batch {batch.batch_id}")

    async def _confirm_aside(self, batch: SendBatchInput, number: int, sent: BatchSent, resume: Resume) -> None:
        """Confirm an uncertain batch on its own timers; what it ends in (sent, failed, split into
        pieces to send) is handled as the sender would have."""
        try:
            sent = await self._confirm(batch, number, resume.plan, sent)
        except ActivityError as error:
            cause = cause_of(error)
            pieces = await self._after_failure(batch.batch_id, read_send_failure(cause.type, cause.details),
                                               str(cause), resume.plan)
            for piece in pieces:
                await self._send_to_the_end(piece, number, resume)
            return
        self._batch_sent(sent)

    async def _send_to_the_end(self, batch_id: str, number: int, resume: Resume) -> None:
        queue = [batch_id]
        while queue and self._cancel is None:
            queue = await self._admit_and_send(queue[0], number, resume) + queue[1:]

    async def _confirm(self, batch: SendBatchInput, number: int, plan: SendPlan, sent: BatchSent) -> BatchSent:
        while sent.confirm_in_seconds is not None:
            self._progress.confirming.append(number + 1)
            self._show()
            await workflow.sleep(timedelta(seconds=sent.confirm_in_seconds), summary=f"confirming batch {number + 1}")
            self._progress.confirming.remove(number + 1)
            sent = await self._attempt(batch, plan)
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
                start_to_close_timeout=timedelta(seconds=60), heartbeat_timeout=heartbeat_timeout(plan),
                retry_policy=DATABASE_RETRY)
            if pieces:
                self._progress.batches_total += len(pieces) - 1
                self._show()
                return pieces
        await self._batch_failed(batch_id, failure.status_code, message, plan)
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

    async def _batch_failed(self, batch_id: str, status_code: int | None, message: str, plan: SendPlan) -> None:
        await workflow.execute_activity_method(
            BatchSendActivities.fail_batch,
            FailBatchInput(batch_id=batch_id, status_code=status_code, message=message),
            start_to_close_timeout=timedelta(seconds=60), heartbeat_timeout=heartbeat_timeout(plan),
            retry_policy=DATABASE_RETRY)
        self._progress.batches_failed += 1
        self._show()

    async def _wait_for_provider(self, plan: SendPlan, error: str) -> None:
        """The provider cannot be reached (or asks to slow down) after the batch's retries: an outage, not
        a verdict on the batch. Wait on a durable timer, from the first wait doubling to the longest;
        every sender waits for the same next try, then the batch goes out as any other would. Runs
        from PROVIDER_PROBE_PATCH on look for the provider's return instead of sleeping it out."""
        if workflow.patched(PROVIDER_PROBE_PATCH):
            await self._probe_for_provider(plan, error)
            return
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

    async def _probe_for_provider(self, plan: SendPlan, error: str) -> None:
        """Every sender waits on one look for the provider's return (an authenticated read every
        `provider_probe_seconds`): the first wait of an outage ends as soon as the provider answers;
        when sending fails again right after, each later wait lasts at least the doubling wait."""
        now = workflow.now()
        if self._probe is None or self._probe.done():
            outage = self._outage or Outage(since=now)
            at_least = 0.0 if outage.waits == 0 else \
                min(plan.outage_first_wait_seconds * 2 ** (outage.waits - 1), plan.outage_max_wait_seconds)
            outage = Outage(since=outage.since, waits=outage.waits + 1)
            self._outage = outage
            self._show(message=f"{self._provider} unreachable since {outage.since:%Y-%m-%d %H:%M:%S} UTC, looking "
                               f"every {plan.provider_probe_seconds:.0f} s for its return ({error})")
            self._probe = asyncio.create_task(self._look_until_back(plan, at_least))
        probe = self._probe
        await workflow.wait_condition(lambda: probe.done() or self._cancel is not None)
        if self._cancel is not None and not probe.done():
            probe.cancel()

    async def _look_until_back(self, plan: SendPlan, at_least: float) -> None:
        while True:
            look = await workflow.execute_activity_method(
                ReputationActivities.probe_provider,
                ProbeProviderInput(every_seconds=plan.provider_probe_seconds, at_least_seconds=at_least,
                                   at_most_seconds=PROBE_ACTIVITY.total_seconds() - 30),
                start_to_close_timeout=PROBE_ACTIVITY, heartbeat_timeout=heartbeat_timeout(plan),
                retry_policy=DATABASE_RETRY, summary=f"look for {self._provider}'s return")
            if look.back:
                return
            at_least = 0.0

    async def _hold_while_paused(self, plan: SendPlan) -> None:
        if self._paused is not None:
            await workflow.wait_condition(lambda: self._paused is None or self._cancel is not None)
        if self._pause_to_clear and self._cancel is None:
            self._pause_to_clear = False
            await self._record_pause("", plan)

    async def _watch_reputation(self, plan: SendPlan) -> None:
        """Every `reputation_check_seconds` at most, read the email's early answers; pause the send
        between batches when its hard-bounce or complaint rate crosses the threshold (the activity
        decides, from the settings). Once an operator resumes, the send is not paused again."""
        if not self._reputation.watching or self._reputation.looking or self._paused is not None:
            return
        now = workflow.now()
        last = self._reputation.last_look
        if last is not None and (now - last).total_seconds() < plan.reputation_check_seconds:
            return
        self._reputation.looking = True
        try:
            email_id = self._progress.email_id
            figures = await workflow.execute_activity_method(
                ReputationActivities.read_reputation, ReadReputationInput(email_id=email_id),
                start_to_close_timeout=timedelta(seconds=60), heartbeat_timeout=heartbeat_timeout(plan),
                retry_policy=DATABASE_RETRY, summary="read the early bounce and complaint rates")
            self._reputation.last_look = workflow.now()
            if figures.pause_reason and self._reputation.watching and self._cancel is None:
                self._paused = figures.pause_reason
                await self._record_pause(figures.pause_reason, plan)
                self._show(status="paused", message=f"paused: {figures.pause_reason}; "
                                                    f"`pressroom newsletter resume {email_id}` or `cancel`")
        finally:
            self._reputation.looking = False

    async def _record_pause(self, reason: str, plan: SendPlan) -> None:
        await workflow.execute_activity_method(
            ReputationActivities.record_pause, RecordPauseInput(email_id=self._progress.email_id, reason=reason),
            start_to_close_timeout=timedelta(seconds=60), heartbeat_timeout=heartbeat_timeout(plan),
            retry_policy=DATABASE_RETRY)

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

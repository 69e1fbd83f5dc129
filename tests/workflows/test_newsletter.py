"""SendNewsletterWorkflow's decisions: lock, batches page by page with bounded concurrency, a failed
batch recorded and the rest still sent, delivery times spread, a resumed run, refusals."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import datetime, timedelta

import pytest
from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from activities.newsletter.failures import RejectedDetails, UnavailableDetails, send_failure
from activities.newsletter.models import (
    BatchCounts,
    BatchesSent,
    BatchSent,
    CreateBatchesInput,
    EmailLock,
    EmailOutcome,
    EmailReputation,
    FailBatchInput,
    FinishEmailInput,
    ListUnsentBatchesInput,
    LockEmailInput,
    ProbeProviderInput,
    ProviderBack,
    ReadReputationInput,
    RecordPauseInput,
    SendBatchesInput,
    SendBatchInput,
    SendPlan,
)
from tests.workflows.conftest import worker_for
from workflows.newsletter import BATCH_PAGE, SendNewsletterWorkflow
from workflows.newsletter_models import (
    CancelSendInput,
    NewsletterProgress,
    Resume,
    SendNewsletterInput,
    newsletter_workflow_id,
)


def plan(**overrides) -> SendPlan:
    return SendPlan(**{"batch_size": 1000, "concurrency": 2, "provider_retries": 2, "provider_retry_seconds": 1.0,
                       "delivery_window_seconds": 0, **overrides})


class FakeSending:
    """The newsletter activities over an in-memory list of batches of 10 recipients each."""

    def __init__(self, batches: int, *, lock: EmailLock | Exception | None = None,
                 failures: dict[str, Exception] | None = None, failing_attempts: int | None = None) -> None:
        self.batch_ids = [f"b{n:04d}" for n in range(batches)]
        self.failing_attempts = failing_attempts  # a batch in `failures` fails only its first N attempts
        self.lock = lock if lock is not None else EmailLock(acquired=True, post_id="p1", plan=plan())
        self.failures = failures or {}
        self.status = {batch_id: "pending" for batch_id in self.batch_ids}
        self.calls: list[str] = []
        self.attempts: dict[str, int] = {}
        self.delivery_times: dict[str, datetime | None] = {}
        self.failed: list[FailBatchInput] = []
        self.in_flight = self.most_in_flight = 0
        # The first batches wait until as many as the plan allows are in flight (at most 5 s), so the
        # overlap shows however slowly a loaded machine hands them out.
        self.overlap = self.lock.plan.concurrency if isinstance(self.lock, EmailLock) and self.lock.plan else 1
        self.overlapped = asyncio.Event()
        self.pause_reasons: list[str] = []  # what successive reputation reads answer; then no pause
        self.reputation_reads = 0
        self.pauses: list[str] = []
        self.probes: list[ProbeProviderInput] = []
        self.groups: list[list[str]] = []  # the batch ids of each send_batches call

    def counts(self) -> BatchCounts:
        sent = sum(1 for status in self.status.values() if status == "submitted")
        failed = sum(1 for status in self.status.values() if status == "failed")
        return BatchCounts(batches_total=len(self.batch_ids), batches_submitted=sent, batches_failed=failed,
                           recipients_total=10 * len(self.batch_ids), recipients_submitted=10 * sent)

    @activity.defn(name="lock_email")
    async def lock_email(self, input: LockEmailInput) -> EmailLock:
        self.calls.append("lock_email")
        if isinstance(self.lock, Exception):
            raise self.lock
        return self.lock

    @activity.defn(name="create_batches")
    async def create_batches(self, input: CreateBatchesInput) -> BatchCounts:
        self.calls.append(f"create_batches retry_failed={input.retry_failed}")
        return self.counts()

    @activity.defn(name="list_unsent_batches")
    async def list_unsent_batches(self, input: ListUnsentBatchesInput) -> list[str]:
        self.calls.append(f"list_unsent_batches limit={input.limit}")
        return [b for b in self.batch_ids if self.status[b] == "pending"][:input.limit]

    @activity.defn(name="send_batch")
    async def send_batch(self, input: SendBatchInput) -> BatchSent:
        self.attempts[input.batch_id] = self.attempts.get(input.batch_id, 0) + 1
        self.delivery_times[input.batch_id] = input.delivery_time
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        if self.in_flight >= self.overlap:
            self.overlapped.set()
        try:
            if not self.overlapped.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.overlapped.wait(), 5)
            await asyncio.sleep(0.005)
            if input.batch_id in self.failures and (self.failing_attempts is None
                                                    or self.attempts[input.batch_id] <= self.failing_attempts):
                raise self.failures[input.batch_id]
            self.status[input.batch_id] = "submitted"
            return BatchSent(batch_id=input.batch_id, recipients=10, provider_id=f"<{input.batch_id}@mg>",
                             reconciled=False)
        finally:
            self.in_flight -= 1

    @activity.defn(name="send_batches")
    async def send_batches(self, input: SendBatchesInput) -> BatchesSent:
        """As the real one: each batch as `send_batch` sends it; one made to fail, or not settled, is
        handed back (a batch of `failures` untried, so that its attempts count as before)."""
        self.groups.append([batch.batch_id for batch in input.batches])

        async def one(batch: SendBatchInput) -> BatchSent | None:
            if batch.batch_id in self.failures:
                return None
            try:
                sent = await self.send_batch(batch)
            except Exception:  # noqa: BLE001 (as the real activity: sent again on its own)
                return None
            return sent if sent.confirm_in_seconds is None else None

        results = await asyncio.gather(*(one(batch) for batch in input.batches))
        sent = [result for result in results if result is not None]
        return BatchesSent(sent=sent, alone=[batch.batch_id for batch, result in zip(input.batches, results,
                                                                                     strict=True) if result is None])

    @activity.defn(name="fail_batch")
    async def fail_batch(self, input: FailBatchInput) -> None:
        self.status[input.batch_id] = "failed"
        self.failed.append(input)

    @activity.defn(name="finish_email")
    async def finish_email(self, input: FinishEmailInput) -> EmailOutcome:
        self.calls.append("finish_email")
        counts = self.counts()
        status = "submitted" if counts.batches_submitted == counts.batches_total else "failed"
        return EmailOutcome(email_id=input.email_id, status=status, counts=counts)

    @activity.defn(name="read_reputation")
    async def read_reputation(self, input: ReadReputationInput) -> EmailReputation:
        self.reputation_reads += 1
        reason = self.pause_reasons.pop(0) if self.pause_reasons else ""
        return EmailReputation(answered=1000, hard_bounced=100 if reason else 0, complained=0, pause_reason=reason)

    @activity.defn(name="record_pause")
    async def record_pause(self, input: RecordPauseInput) -> None:
        self.pauses.append(input.reason)

    @activity.defn(name="probe_provider")
    async def probe_provider(self, input: ProbeProviderInput) -> ProviderBack:
        self.probes.append(input)
        return ProviderBack(back=True)

    def activities(self) -> list:
        return [self.lock_email, self.create_batches, self.list_unsent_batches, self.send_batch, self.send_batches,
                self.fail_batch,
                self.finish_email, self.read_reputation, self.record_pause, self.probe_provider]


async def send(env, fake: FakeSending, *, email_id: str | None = None, workflow_id: str | None = None,
               resume: Resume | None = None):
    """Run a send to its end; returns (outcome, the progress query's last answer)."""
    email_id = email_id or f"e-{uuid.uuid4().hex[:8]}"
    async with worker_for(env, [SendNewsletterWorkflow], fake.activities()) as task_queue:
        handle = await env.client.start_workflow(
            SendNewsletterWorkflow.run, SendNewsletterInput(email_id=email_id, resume=resume),
            id=workflow_id or newsletter_workflow_id(email_id), task_queue=task_queue)
        outcome = await handle.result()
        return outcome, await handle.query(SendNewsletterWorkflow.progress)


async def test_every_batch_is_sent_page_by_page_with_bounded_concurrency(env):
    fake = FakeSending(BATCH_PAGE + 5, lock=EmailLock(acquired=True, plan=plan(concurrency=3)))
    outcome, progress = await send(env, fake)
    assert outcome.status == "submitted"
    assert all(status == "submitted" for status in fake.status.values())
    assert set(fake.attempts.values()) == {1}, "no batch is sent twice"
    assert fake.most_in_flight == 3, "at most `concurrency` batches at once, and that many are used"
    assert fake.calls == ["lock_email", "create_batches retry_failed=True", f"list_unsent_batches limit={BATCH_PAGE}",
                          f"list_unsent_batches limit={BATCH_PAGE}", f"list_unsent_batches limit={BATCH_PAGE}",
                          "finish_email"]
    assert progress == NewsletterProgress(email_id=outcome.email_id, status="submitted",
                                          batches_total=BATCH_PAGE + 5, batches_sent=BATCH_PAGE + 5,
                                          recipients_total=10 * (BATCH_PAGE + 5),
                                          recipients_sent=10 * (BATCH_PAGE + 5))


REFUSAL = "Mailgun refused the batch: 'to' parameter is not a valid address"


@pytest.mark.parametrize("refused", [
    send_failure("ProviderRejected", REFUSAL, RejectedDetails(status_code=400), non_retryable=True),
    # as releases before 0.6.0 raised it (their histories hold it): positional details, Mailgun's name
    ApplicationError(REFUSAL, 400, type="MailgunRejected", non_retryable=True)], ids=["details", "stored"])
async def test_a_refused_batch_is_recorded_with_its_status_code_and_the_rest_still_go(env, refused):
    fake = FakeSending(4, failures={"b0001": refused})
    outcome, progress = await send(env, fake)
    assert fake.attempts["b0001"] == 1, "a refusal is not retried"
    assert [(f.batch_id, f.status_code, f.message) for f in fake.failed] == [
        ("b0001", 400, f"{refused.type}: {REFUSAL}")]
    assert [fake.status[b] for b in fake.batch_ids] == ["submitted", "failed", "submitted", "submitted"]
    assert outcome.status == "failed"
    assert (progress.batches_sent, progress.batches_failed) == (3, 1)


@pytest.mark.parametrize("unreachable", [
    send_failure("ProviderUnavailable", "Mailgun could not be reached", UnavailableDetails(outage=True)),
    send_failure("ProviderRateLimited", "Mailgun asked to slow down", UnavailableDetails(
        status_code=429, outage=True, retry_after_seconds=5)),
    ApplicationError("Mailgun could not be reached", None, "mailgun-unreachable", type="MailgunUnavailable"),
    ApplicationError("Mailgun asked to slow down", 429, 5, "mailgun-unreachable", type="MailgunRateLimited")],
    ids=["unavailable", "rate-limited", "stored-unavailable", "stored-rate-limited"])
async def test_an_outage_is_waited_out_by_looking_for_the_provider_and_the_batch_sent_once(env, unreachable):
    """Not taken after its retries (no connection, 429): the send looks for the provider's return
    (an authenticated read, never a send), says so, and sends the batch when it is back; when sending
    fails again right after a return, each later wait lasts at least the doubling wait."""
    fake = FakeSending(2, lock=EmailLock(acquired=True, plan=plan(
        provider_retries=1, provider_retry_seconds=10, outage_first_wait_seconds=60, outage_max_wait_seconds=150,
        provider_probe_seconds=20)),
        failures={"b0000": unreachable}, failing_attempts=8)  # four rounds of two attempts each
    email_id = f"e-{uuid.uuid4().hex[:8]}"
    outcome, progress = await send(env, fake, email_id=email_id)
    assert outcome.status == "submitted" and fake.failed == []
    assert fake.attempts == {"b0000": 9, "b0001": 1}
    assert progress.message == "" and progress.batches_sent == 2
    assert [p.at_least_seconds for p in fake.probes] == [0, 60, 120, 150]
    assert {p.every_seconds for p in fake.probes} == {20}
    history = await env.client.get_workflow_handle(newsletter_workflow_id(email_id)).fetch_history()
    assert not any(event.HasField("timer_started_event_attributes") for event in history.events), \
        "no blind sleep: the look for the provider's return is the wait"


@pytest.mark.parametrize("heartbeat_seconds, expected", [(None, 15.0), (7.0, 7.0)])
async def test_every_step_after_the_lock_is_watched_by_the_plans_heartbeat_timeout(env, heartbeat_seconds, expected):
    """How soon a dead worker's steps are retried elsewhere is the plan's `send_heartbeat_seconds`;
    plans stored before it was a setting (none in them) keep 15 s. Every step after the lock has it:
    the long ones (written, sent in a group and alone, the provider looked for) and the short ones,
    which a killed worker would otherwise hold for their whole start-to-close timeout."""
    fake = FakeSending(4, lock=EmailLock(acquired=True, plan=plan(
        concurrency=4, provider_retries=0, heartbeat_seconds=heartbeat_seconds)),
        failures={"b0000": send_failure("ProviderUnavailable", "Mailgun could not be reached",
                                        UnavailableDetails(outage=True))}, failing_attempts=1)
    fake.overlap = 1  # no batch waits for others to be in flight: concurrency is not what this reads
    email_id = f"e-{uuid.uuid4().hex[:8]}"
    outcome, _ = await send(env, fake, email_id=email_id)
    assert outcome.status == "submitted" and fake.probes
    history = await env.client.get_workflow_handle(newsletter_workflow_id(email_id)).fetch_history()
    timeouts: dict[str, set[float]] = {}
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            scheduled = event.activity_task_scheduled_event_attributes
            timeouts.setdefault(scheduled.activity_type.name, set()).add(scheduled.heartbeat_timeout.ToTimedelta()
                                                                         .total_seconds())
    assert timeouts.pop("lock_email") == {0.0}  # before the plan: its own start-to-close timeout
    assert timeouts == {name: {expected} for name in ["create_batches", "list_unsent_batches", "send_batches",
                                                      "send_batch", "probe_provider", "read_reputation",
                                                      "finish_email"]}


@pytest.mark.parametrize("uncertain", [
    send_failure("ProviderUnavailable", "Mailgun failed the batch (503)", UnavailableDetails(status_code=503)),
    ApplicationError("Mailgun failed the batch (503)", 503, type="MailgunUnavailable")], ids=["details", "stored"])
async def test_an_uncertain_failure_after_its_retries_keeps_todays_path_and_fails_the_batch(env, uncertain):
    """A 5xx may have been queued: not an outage to wait out blindly; the batch fails, marked uncertain,
    and a later send looks it up first."""
    fake = FakeSending(2, lock=EmailLock(acquired=True, plan=plan(provider_retries=3, provider_retry_seconds=30)),
                       failures={"b0000": uncertain})
    outcome, _ = await send(env, fake)
    assert fake.attempts == {"b0000": 4, "b0001": 1}, "provider_retries retries after the first attempt"
    assert [(f.batch_id, f.status_code) for f in fake.failed] == [("b0000", 503)]
    assert outcome.status == "failed"


async def test_a_refusal_that_will_not_change_fails_the_batch_at_once(env):
    unauthorized = ApplicationError("Mailgun answered 401: the API key was refused", 401, type="MailgunRejected",
                                    non_retryable=True)
    fake = FakeSending(2, failures={"b0000": unauthorized})
    outcome, _ = await send(env, fake)
    assert fake.attempts == {"b0000": 1, "b0001": 1}
    assert [(f.batch_id, f.status_code) for f in fake.failed] == [("b0000", 401)]
    assert outcome.status == "failed"


async def test_delivery_times_spread_the_batches_over_the_window(env):
    fake = FakeSending(4, lock=EmailLock(acquired=True, plan=plan(delivery_window_seconds=3600)))
    await send(env, fake)
    times = [fake.delivery_times[b] for b in fake.batch_ids]
    assert all(times)
    assert [(t - times[0]).total_seconds() for t in times] == [0, 900, 1800, 2700]


async def test_without_a_window_no_delivery_time_is_asked(env):
    fake = FakeSending(2)
    await send(env, fake)
    assert list(fake.delivery_times.values()) == [None, None]


async def test_a_lock_held_elsewhere_skips_the_send_without_touching_batches(env):
    fake = FakeSending(3, lock=EmailLock(acquired=False, reason="email e1 is already submitted"))
    outcome, progress = await send(env, fake)
    assert (outcome.status, outcome.message) == ("skipped", "email e1 is already submitted")
    assert fake.calls == ["lock_email"] and not fake.attempts
    assert progress.status == "skipped"


async def test_a_refused_lock_fails_the_run_with_the_reason_in_one_line(env):
    fake = FakeSending(3, lock=ApplicationError("email e404 does not exist", type="EmailNotFound",
                                                non_retryable=True))
    with pytest.raises(WorkflowFailureError) as failed:
        await send(env, fake, email_id="e404")
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.message, cause.non_retryable) == ("NewsletterRefused", "email e404 does not exist", True)
    assert fake.calls == ["lock_email"]


async def test_a_run_under_another_id_is_refused_before_any_activity(env):
    fake = FakeSending(1)
    with pytest.raises(WorkflowFailureError) as failed:
        await send(env, fake, email_id="e1", workflow_id=f"not-the-newsletter-id-{uuid.uuid4().hex[:6]}")
    assert "must run as newsletter-e1" in failed.value.cause.message
    assert fake.calls == []


async def test_a_continued_run_resumes_without_locking_or_creating_batches(env):
    fake = FakeSending(5)
    for batch_id in fake.batch_ids[:2]:
        fake.status[batch_id] = "submitted"  # sent by the run before
    started = (await env.get_current_time() - timedelta(hours=1)).timestamp()
    resume = Resume(plan=plan(), progress=NewsletterProgress(email_id="e1", status="sending", batches_total=5,
                                                             batches_sent=2, recipients_total=50, recipients_sent=20),
                    started_at=started, dispatched=2)
    outcome, progress = await send(env, fake, email_id="e1", resume=resume)
    assert "lock_email" not in fake.calls and not any(c.startswith("create_batches") for c in fake.calls)
    assert sorted(fake.attempts) == ["b0002", "b0003", "b0004"]
    assert outcome.status == "submitted" and progress.batches_sent == 5


class FakeChunkedCreation(FakeSending):
    """Batches that appear `chunk` at a time, one chunk per create_batches call, as a chunked
    creation writes them; `log` records when each chunk was written and each batch sent."""

    def __init__(self, batches: int, chunk: int, **kwargs) -> None:
        super().__init__(batches, **kwargs)
        self.chunk = chunk
        self.written = 0
        self.log: list[str] = []

    def counts(self) -> BatchCounts:
        counts = super().counts()
        counts.creating = self.written < len(self.batch_ids)
        return counts

    @activity.defn(name="create_batches")
    async def create_batches(self, input: CreateBatchesInput) -> BatchCounts:
        self.calls.append(f"create_batches retry_failed={input.retry_failed} chunked={input.chunked}")
        await asyncio.sleep(0.05)  # writing a chunk takes a while: sends of the last one overlap it
        self.written = min(len(self.batch_ids), self.written + self.chunk)
        self.log.append(f"written {self.written}")
        return self.counts()

    @activity.defn(name="list_unsent_batches")
    async def list_unsent_batches(self, input: ListUnsentBatchesInput) -> list[str]:
        self.calls.append(f"list_unsent_batches limit={input.limit}")
        return [b for b in self.batch_ids[:self.written] if self.status[b] == "pending"][:input.limit]

    @activity.defn(name="send_batch")
    async def send_batch(self, input: SendBatchInput) -> BatchSent:
        assert self.batch_ids.index(input.batch_id) < self.written, "a batch is sent only once it is written"
        self.log.append(f"sent {input.batch_id}")
        return await super().send_batch(input)

    def activities(self) -> list:
        return [self.lock_email, self.create_batches, self.list_unsent_batches, self.send_batch, self.send_batches,
                self.fail_batch,
                self.finish_email, self.read_reputation, self.record_pause, self.probe_provider]


async def test_sending_starts_on_the_first_chunk_while_the_rest_are_written(env):
    fake = FakeChunkedCreation(25, chunk=10, lock=EmailLock(acquired=True, plan=plan(concurrency=3)))
    outcome, progress = await send(env, fake)

    assert outcome.status == "submitted"
    assert set(fake.attempts) == set(fake.batch_ids) and set(fake.attempts.values()) == {1}
    creates = [call for call in fake.calls if call.startswith("create_batches")]
    # The failed batches of an earlier send are retried once, by the first call; each call writes one chunk.
    assert creates == ["create_batches retry_failed=True chunked=True"] + \
        ["create_batches retry_failed=False chunked=True"] * 2
    # Sending did not wait for the whole creation: a batch went out before the last chunk was written.
    assert fake.log.index("sent b0000") < fake.log.index("written 25")
    assert fake.calls[-1] == "finish_email"
    assert (progress.batches_total, progress.batches_sent) == (25, 25)


async def test_a_creation_that_fails_fails_the_send_after_what_was_written_is_sent(env):
    class FailsOnSecondChunk(FakeChunkedCreation):
        @activity.defn(name="create_batches")
        async def create_batches(self, input: CreateBatchesInput) -> BatchCounts:
            if self.written:
                raise ApplicationError("email e1 does not exist", type="EmailNotFound", non_retryable=True)
            return await super().create_batches(input)

    fake = FailsOnSecondChunk(25, chunk=10)
    with pytest.raises(WorkflowFailureError) as failure:
        await send(env, fake)
    assert "does not exist" in str(failure.value.cause.cause)
    assert sorted(fake.attempts) == fake.batch_ids[:10], "the first chunk was sent, nothing else"
    assert "finish_email" not in fake.calls


async def test_a_cancel_stops_a_lock_that_is_being_retried(env):
    """A lock whose every attempt fails retryably (a database that does not answer): before, the run
    kept retrying it and a cancel waited behind it; now the cancel stops it, and the email is
    recorded cancelled by the finish."""
    fake = FakeSending(3, lock=ApplicationError("connection refused", type="ConnectionRefusedError"))
    finished: list[FinishEmailInput] = []

    @activity.defn(name="finish_email")
    async def finish_email(input: FinishEmailInput) -> EmailOutcome:
        finished.append(input)
        return EmailOutcome(email_id=input.email_id, status="cancelled", message=f"cancelled by {input.cancelled_by}")

    activities = [a for a in fake.activities() if a != fake.finish_email] + [finish_email]
    email_id = f"e-{uuid.uuid4().hex[:8]}"
    async with worker_for(env, [SendNewsletterWorkflow], activities) as task_queue:
        handle = await env.client.start_workflow(
            SendNewsletterWorkflow.run, SendNewsletterInput(email_id=email_id),
            id=newsletter_workflow_id(email_id), task_queue=task_queue)
        while fake.calls.count("lock_email") < 2:  # retried at least once
            await env.sleep(1)
        await handle.signal(SendNewsletterWorkflow.cancel, CancelSendInput(by="ops"))
        outcome = await handle.result()
    assert (outcome.status, outcome.message) == ("cancelled", "cancelled by ops")
    assert [(f.email_id, f.cancelled_by) for f in finished] == [(email_id, "ops")]
    assert "create_batches retry_failed=True" not in fake.calls and not fake.attempts


async def test_a_cancel_during_the_lock_attempt_writes_no_batch(env):
    """The cancel arrives while the lock's attempt runs; the attempt then takes the lock: the run
    waits for it, writes no batch, and the finish records the email cancelled (releasing the lock)."""
    release = asyncio.Event()
    locking = asyncio.Event()
    fake = FakeSending(3)
    finished: list[FinishEmailInput] = []

    @activity.defn(name="lock_email")
    async def lock_email(input: LockEmailInput) -> EmailLock:
        fake.calls.append("lock_email")
        locking.set()
        await release.wait()
        return fake.lock

    @activity.defn(name="finish_email")
    async def finish_email(input: FinishEmailInput) -> EmailOutcome:
        finished.append(input)
        return EmailOutcome(email_id=input.email_id, status="cancelled", message="cancelled")

    activities = [a for a in fake.activities() if a not in (fake.lock_email, fake.finish_email)]
    email_id = f"e-{uuid.uuid4().hex[:8]}"
    async with worker_for(env, [SendNewsletterWorkflow], [*activities, lock_email, finish_email]) as task_queue:
        handle = await env.client.start_workflow(
            SendNewsletterWorkflow.run, SendNewsletterInput(email_id=email_id),
            id=newsletter_workflow_id(email_id), task_queue=task_queue)
        await asyncio.wait_for(locking.wait(), 60)
        await handle.signal(SendNewsletterWorkflow.cancel, CancelSendInput(by="ops"))
        progress = await handle.query(SendNewsletterWorkflow.progress)
        assert progress.status == "cancelling"
        release.set()
        outcome = await handle.result()
    assert outcome.status == "cancelled"
    assert [(f.email_id, f.cancelled_by) for f in finished] == [(email_id, "ops")]
    assert fake.calls == ["lock_email"]  # no batch written, none listed, none sent


class FakeUncertain(FakeSending):
    """b0000's first send is uncertain (the provider may have taken it, its events not there yet):
    the activity asks to look again in 60 s; the look finds it accepted."""

    def __init__(self, batches: int, **kwargs) -> None:
        super().__init__(batches, **kwargs)
        self.order: list[str] = []

    @activity.defn(name="send_batch")
    async def send_batch(self, input: SendBatchInput) -> BatchSent:
        self.attempts[input.batch_id] = self.attempts.get(input.batch_id, 0) + 1
        if input.batch_id == "b0000":
            self.order.append(f"b0000 attempt {self.attempts['b0000']}")
            if self.attempts["b0000"] == 1:
                return BatchSent(batch_id="b0000", recipients=0, provider_id="", reconciled=False,
                                 confirm_in_seconds=60)
            self.status["b0000"] = "submitted"
            return BatchSent(batch_id="b0000", recipients=10, provider_id="<b0000@mg>", reconciled=True)
        self.order.append(input.batch_id)
        self.status[input.batch_id] = "submitted"
        return BatchSent(batch_id=input.batch_id, recipients=10, provider_id=f"<{input.batch_id}@mg>",
                         reconciled=False)


async def test_an_uncertain_batch_is_confirmed_aside_while_the_others_go_out(env):
    """One sender, an uncertain first batch: the other batches go out while it waits for its events;
    the email ends once it is confirmed, each batch sent once."""
    fake = FakeUncertain(5, lock=EmailLock(acquired=True, plan=plan(concurrency=1)))
    outcome, progress = await send(env, fake)
    assert fake.order == ["b0000 attempt 1", "b0001", "b0002", "b0003", "b0004", "b0000 attempt 2"]
    assert outcome.status == "submitted" and progress.batches_sent == 5 and progress.confirming == []
    assert progress.recipients_sent == 50


async def start(env, fake: FakeSending, task_queue: str) -> tuple[str, object]:
    email_id = f"e-{uuid.uuid4().hex[:8]}"
    handle = await env.client.start_workflow(SendNewsletterWorkflow.run, SendNewsletterInput(email_id=email_id),
                                             id=newsletter_workflow_id(email_id), task_queue=task_queue)
    return email_id, handle


async def progress_when(handle, condition) -> NewsletterProgress:
    """The progress query's answer once `condition` holds of it (the run answers while it waits)."""
    while True:
        progress = await handle.query(SendNewsletterWorkflow.progress)
        if condition(progress):
            return progress
        await asyncio.sleep(0.05)


async def test_a_send_whose_early_rates_cross_the_threshold_pauses_and_resumes_with_nobody_skipped(env):
    from workflows.newsletter_models import ResumePausedInput

    fake = FakeSending(6, lock=EmailLock(acquired=True, plan=plan(concurrency=1)))
    fake.pause_reasons = ["hard bounces at 10.0% of the first 1,000 answered (pause at 5.0%)"]
    async with worker_for(env, [SendNewsletterWorkflow], fake.activities()) as task_queue:
        _, handle = await start(env, fake, task_queue)
        paused = await progress_when(handle, lambda p: p.status == "paused")
        assert "hard bounces at 10.0%" in paused.message and "newsletter resume" in paused.message
        assert paused.batches_sent == 1 and fake.pauses == [fake.pauses[0]] and fake.pauses[0].startswith("hard")
        await handle.signal(SendNewsletterWorkflow.resume_paused, ResumePausedInput(by="editor"))
        outcome = await handle.result()
    assert outcome.status == "submitted"
    assert fake.attempts == {batch_id: 1 for batch_id in fake.batch_ids}, "every batch once, none skipped"
    assert fake.pauses[-1] == "", "the row no longer says paused"
    assert fake.reputation_reads == 1, "once resumed, the rates are not read to pause again"


async def test_a_paused_send_cancelled_sends_nothing_more(env):
    fake = FakeSending(6, lock=EmailLock(acquired=True, plan=plan(concurrency=2)))
    fake.pause_reasons = ["complaints at 0.50% of the first 1,000 answered (pause at 0.30%)"]
    async with worker_for(env, [SendNewsletterWorkflow], fake.activities()) as task_queue:
        _, handle = await start(env, fake, task_queue)
        paused = await progress_when(handle, lambda p: p.status == "paused")
        await handle.signal(SendNewsletterWorkflow.cancel, CancelSendInput(by="editor"))
        await handle.result()
    # A batch already in flight at the pause (two senders) may still finish; nothing starts after it.
    assert sum(fake.attempts.values()) <= paused.batches_sent + 1
    assert all(fake.attempts.get(b, 0) <= 1 for b in fake.batch_ids)
    assert [b for b in fake.batch_ids if fake.status[b] == "pending"], "the rest stays unsent"

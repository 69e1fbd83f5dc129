"""OutboxRelayWorkflow and DeliverOutboxEntryWorkflow's decisions: the relay keeps calling its
activity and continues as new; a delivery completes, trusts the ledger, or aborts with the reason.

A welcome email's send goes through the in-memory email provider, the port the real handler sends
through: its outage, refusal and rate limit fail the fake handler as they fail the real one."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from activities.outbox.models import (
    AbortEntryInput,
    CompleteEntryInput,
    EntryInput,
    EntryResult,
    RelayInput,
    RelayResult,
)
from pressroom.providers.memory import MemoryProvider
from pressroom.providers.port import Message, ProviderError, activity_error
from tests.workflows.conftest import worker_for, workflow_id
from workflows.outbox import DeliverOutboxEntryWorkflow, OutboxRelayWorkflow


class FakeDelivery:
    """The delivery activities: `handle` answers or raises, or, a provider, sends the welcome email
    through it; completions and aborts are recorded."""

    def __init__(self, handle: EntryResult | BaseException | MemoryProvider) -> None:
        self.handle = handle
        self.attempts = 0
        self.completed: list[CompleteEntryInput] = []
        self.aborted: list[AbortEntryInput] = []
        self.inputs: list[EntryInput] = []

    @activity.defn(name="handle_entry")
    async def handle_entry(self, input: EntryInput) -> EntryResult:
        self.attempts += 1
        self.inputs.append(input)
        if isinstance(self.handle, MemoryProvider):
            return await self._send_welcome(self.handle, input)
        if isinstance(self.handle, BaseException):
            raise self.handle
        return self.handle

    @staticmethod
    async def _send_welcome(provider: MemoryProvider, input: EntryInput) -> EntryResult:
        message = provider.prepare(Message(from_address="news@example.com", subject="Welcome",
                                           html="<p>Welcome</p>", text="Welcome", tags=["welcome-email"]))
        try:
            provider_id = (await provider.send(message, {"new@example.com": {}},
                                               mark={"pressroom-outbox": input.outbox_id})).provider_id
        except ProviderError as error:
            raise activity_error(error) from None
        return EntryResult(result={"provider_id": provider_id})

    @activity.defn(name="complete_entry")
    async def complete_entry(self, input: CompleteEntryInput) -> None:
        self.completed.append(input)

    @activity.defn(name="abort_entry")
    async def abort_entry(self, input: AbortEntryInput) -> None:
        self.aborted.append(input)

    def activities(self) -> list:
        return [self.handle_entry, self.complete_entry, self.abort_entry]


async def deliver(env, fake: FakeDelivery, *, max_attempts: int = 6) -> str:
    async with worker_for(env, [DeliverOutboxEntryWorkflow], fake.activities()) as task_queue:
        return await env.client.execute_workflow(
            DeliverOutboxEntryWorkflow.run, EntryInput(outbox_id="o1", max_attempts=max_attempts),
            id=workflow_id("outbox"), task_queue=task_queue)


async def test_a_handled_entry_is_completed_with_the_handlers_result(env):
    fake = FakeDelivery(EntryResult(result={"provider_id": "welcome-1@mg"}))
    assert await deliver(env, fake) == "succeeded"
    assert fake.completed == [CompleteEntryInput(outbox_id="o1", result={"provider_id": "welcome-1@mg"})]
    assert fake.aborted == [] and fake.attempts == 1


async def history_of_delivery(env, fake: FakeDelivery):
    """(activities scheduled, markers recorded) of one delivery run."""
    async with worker_for(env, [DeliverOutboxEntryWorkflow], fake.activities()) as task_queue:
        handle = await env.client.start_workflow(DeliverOutboxEntryWorkflow.run, EntryInput(outbox_id="o1"),
                                                 id=workflow_id("outbox"), task_queue=task_queue)
        assert await handle.result() == "succeeded"
        history = await handle.fetch_history()
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events
                 if e.HasField("activity_task_scheduled_event_attributes")]
    markers = [e.marker_recorded_event_attributes.marker_name for e in history.events
               if e.HasField("marker_recorded_event_attributes")]
    return scheduled, markers


async def test_a_new_delivery_lets_the_handlers_activity_complete_its_entry(env):
    """Runs started with the outbox-complete-in-handler patch ask the handler's activity to record
    the entry: one activity per entry and no step after it, as a raw one-activity workflow has."""
    fake = FakeDelivery(EntryResult(result={}, completed=True))
    scheduled, markers = await history_of_delivery(env, fake)
    assert scheduled == ["handle_entry"] and "core_local_activity" not in markers
    assert [input.complete for input in fake.inputs] == [True]
    assert fake.completed == [] and fake.aborted == []


async def test_an_entry_the_handler_could_not_record_is_completed_in_a_local_activity(env):
    """The handler's work is done but its write failed (completed false): the delivery records the
    entry itself, in a local activity that waits out the database."""
    fake = FakeDelivery(EntryResult(result={}))
    scheduled, markers = await history_of_delivery(env, fake)
    assert scheduled == ["handle_entry"] and "core_local_activity" in markers
    assert fake.completed == [CompleteEntryInput(outbox_id="o1", result={})]


async def test_an_entry_the_ledger_already_holds_is_not_completed_again(env):
    fake = FakeDelivery(EntryResult(result={"provider_id": "welcome-1@mg"}, already_succeeded=True))
    assert await deliver(env, fake) == "succeeded"
    assert fake.completed == [] and fake.aborted == []


async def test_a_refusal_aborts_at_once_with_its_code_and_words(env):
    fake = FakeDelivery(ApplicationError("MemberCreatedEvent payload is invalid: member_id: Field required",
                                         type="INVALID_PAYLOAD", non_retryable=True))
    assert await deliver(env, fake) == "aborted"
    assert fake.attempts == 1 and fake.completed == []
    assert fake.aborted == [AbortEntryInput(outbox_id="o1", code="INVALID_PAYLOAD",
                                            message="MemberCreatedEvent payload is invalid: member_id: Field required")]


async def test_a_failing_handler_is_tried_max_attempts_times_then_aborted(env):
    fake = FakeDelivery(ApplicationError("Mailgun answered 500", type="MailgunUnavailable",
                                         next_retry_delay=timedelta(seconds=40)))
    assert await deliver(env, fake, max_attempts=3) == "aborted"
    assert fake.attempts == 3
    assert fake.aborted == [AbortEntryInput(outbox_id="o1", code="MailgunUnavailable", message="Mailgun answered 500")]


async def test_a_welcome_sent_through_the_provider_completes_with_its_id(env):
    provider = MemoryProvider()
    fake = FakeDelivery(provider)
    assert await deliver(env, fake) == "succeeded"
    assert [sent.mark for sent in provider.sent] == [{"pressroom-outbox": "o1"}]
    assert fake.completed == [CompleteEntryInput(outbox_id="o1", result={"provider_id": provider.sent[0].provider_id})]


async def test_an_unreachable_provider_is_tried_max_attempts_times_then_aborted(env):
    provider = MemoryProvider()
    provider.faults.outage = True
    fake = FakeDelivery(provider)
    assert await deliver(env, fake, max_attempts=3) == "aborted"
    assert fake.attempts == 3 and provider.sent == []
    assert [(a.code, a.message) for a in fake.aborted] == [
        ("ProviderUnavailable", "the in-memory provider cannot be reached; nothing was sent or read")]


async def test_a_provider_refusal_aborts_at_once(env):
    provider = MemoryProvider()
    provider.faults.refused = True
    fake = FakeDelivery(provider)
    assert await deliver(env, fake) == "aborted"
    assert fake.attempts == 1 and [a.code for a in fake.aborted] == ["ProviderRejected"]


async def test_a_rate_limit_is_waited_out_and_the_welcome_goes_once(env):
    provider = MemoryProvider()
    provider.faults.rate_limited = 2
    fake = FakeDelivery(provider)
    assert await deliver(env, fake) == "succeeded"
    assert fake.attempts == 3 and len(provider.sent) == 1


class FakeRelay:
    """relay_outbox that records each call's run and input; call `until` ends the relay.

    It ends by a refusal the workflow cannot retry, so that no activity is left in flight: the
    time-skipping server stops skipping time while one is, which would slow every later test.
    """

    def __init__(self, until: int, *, fail_first: bool = False) -> None:
        self.until = until
        self.fail_first = fail_first
        self.calls: list[tuple[str, float, timedelta | None]] = []

    @activity.defn(name="relay_outbox")
    async def relay_outbox(self, input: RelayInput) -> RelayResult:
        info = activity.info()
        self.calls.append((info.workflow_run_id, input.run_seconds, info.heartbeat_timeout))
        if len(self.calls) >= self.until:
            raise ApplicationError("the test has seen enough", type="TestDone", non_retryable=True)
        if self.fail_first and len(self.calls) == 1:
            raise RuntimeError("database restarting")
        return RelayResult(started=1)


async def run_relay(env, fake: FakeRelay) -> None:
    async with worker_for(env, [OutboxRelayWorkflow], [fake.relay_outbox]) as task_queue:
        handle = await env.client.start_workflow(OutboxRelayWorkflow.run, RelayInput(run_seconds=7),
                                                 id=workflow_id("outbox-relay"), task_queue=task_queue)
        with pytest.raises(WorkflowFailureError):
            await handle.result()


async def test_the_relay_calls_its_activity_again_and_continues_as_new_with_its_input(env):
    fake = FakeRelay(until=22)
    await run_relay(env, fake)
    runs = [run_id for run_id, _, _ in fake.calls]
    assert len(set(runs[:20])) == 1 and runs[20] != runs[0], "20 calls per run, then a new run"
    assert {seconds for _, seconds, _ in fake.calls} == {7}, "the input carries over"
    assert all(timeout is not None and timeout <= timedelta(seconds=30) for _, _, timeout in fake.calls), \
        "a dead relay is noticed by its heartbeat timeout"


async def test_a_failed_relay_activity_is_retried(env):
    fake = FakeRelay(until=2, fail_first=True)
    await run_relay(env, fake)
    assert len(fake.calls) == 2 and fake.calls[0][0] == fake.calls[1][0], "the same run tried again"

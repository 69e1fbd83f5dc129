"""The outbox relay and one delivery workflow per entry (the outbox worker protocol on Temporal).

A lease column refreshed by a heartbeat is not needed: the relay activity's heartbeat timeout
notices a dead relay and Temporal's retry replaces it. The backoff table (PRESSROOM_OUTBOX_BACKOFF_SECONDS)
becomes the handler activity's retry delays, and the entry's state machine reads in
DeliverOutboxEntryWorkflow: handle (the ledger is asked first), then
record succeeded, or aborted with the last error once the attempts are spent.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.outbox.delivery import OutboxDeliveryActivities
    from activities.outbox.models import AbortEntryInput, CompleteEntryInput, EntryInput, EntryResult, RelayInput
    from activities.outbox.relay import OutboxRelayActivities
    from pressroom.errors import cause_of
    from workflows.policies import DATABASE_RETRY

RELAY_WORKFLOW_ID = "outbox-relay"


@workflow.defn
class OutboxRelayWorkflow:
    """Runs the relay activity for ever; one per cluster (its id), continued as new to stay small."""

    @workflow.run
    async def run(self, input: RelayInput) -> None:
        for _ in range(20):
            await workflow.execute_activity_method(
                OutboxRelayActivities.relay_outbox, input,
                start_to_close_timeout=timedelta(seconds=input.run_seconds + 60),
                heartbeat_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)))
        workflow.continue_as_new(input)


# Deliveries recorded before this patch resend an uncertain welcome email at once; later ones
# wait on a timer for its events.
CONFIRM_UNCERTAIN_PATCH = "confirm-uncertain-welcome"
# Deliveries recorded before this patch complete the entry in a (task-queue) activity; later ones
# in a local activity.
COMPLETE_LOCALLY_PATCH = "outbox-complete-locally"
# Deliveries recorded before this patch complete the entry in a step after the handler's; later ones
# let the handler's activity record it, and take that step only when its write failed.
COMPLETE_IN_HANDLER_PATCH = "outbox-complete-in-handler"
# Deliveries recorded before this patch send a new member's welcome email themselves; later ones
# enter the member into the welcome automation of their status, whose run sends it.
WELCOME_AUTOMATION_PATCH = "outbox-welcome-automation"


# Outside the sandbox: there is one run per outbox entry, and a sandboxed run re-imports this
# module in a fresh sandbox when it starts, the largest single cost of an entry in the worker
# (about 12 ms of CPU each under py-spy, bench/outbox.py). The code below calls nothing but the
# workflow API and the models above; the stored histories of every release replay against it
# (tests/upgrade).
@workflow.defn(sandboxed=False)
class DeliverOutboxEntryWorkflow:
    @workflow.run
    async def run(self, input: EntryInput) -> str:
        if workflow.patched(CONFIRM_UNCERTAIN_PATCH):
            input = input.model_copy(update={"confirm": True})
        if workflow.patched(COMPLETE_IN_HANDLER_PATCH):
            input = input.model_copy(update={"complete": True})
        if workflow.patched(WELCOME_AUTOMATION_PATCH):
            input = input.model_copy(update={"automation": True})
        try:
            handled = await self._handle(input)
            while handled.confirm_in_seconds is not None:
                # The send may have reached Mailgun and is not in its events yet: look again later.
                await workflow.sleep(timedelta(seconds=handled.confirm_in_seconds), summary="confirming the send")
                handled = await self._handle(input)
        except ActivityError as error:
            return await self._abort(input, error)
        if handled.already_succeeded or handled.completed:
            return "succeeded"
        await self._complete(input, handled)
        return "succeeded"

    @staticmethod
    async def _complete(input: EntryInput, handled: EntryResult) -> None:
        complete = CompleteEntryInput(outbox_id=input.outbox_id, result=handled.result)
        if workflow.patched(COMPLETE_LOCALLY_PATCH):
            # One database statement needs no trip through the task queue: as a local activity the
            # entry costs the engine what a one-activity workflow costs. The handler's result is in
            # the history before the ledger is written, so a retry of this step never handles again.
            await workflow.execute_local_activity_method(
                OutboxDeliveryActivities.complete_entry, complete, start_to_close_timeout=timedelta(seconds=30),
                retry_policy=DATABASE_RETRY)
        else:
            await workflow.execute_activity_method(
                OutboxDeliveryActivities.complete_entry, complete, start_to_close_timeout=timedelta(seconds=30),
                retry_policy=DATABASE_RETRY)

    @staticmethod
    async def _handle(input: EntryInput) -> EntryResult:
        return await workflow.execute_activity_method(
            OutboxDeliveryActivities.handle_entry, input, start_to_close_timeout=timedelta(minutes=2),
            heartbeat_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(maximum_attempts=input.max_attempts), summary="handle")

    async def _abort(self, input: EntryInput, error: ActivityError) -> str:
        cause = cause_of(error)
        code, message = cause.type or "HANDLER_FAILED", cause.message
        await workflow.execute_activity_method(
            OutboxDeliveryActivities.abort_entry,
            AbortEntryInput(outbox_id=input.outbox_id, code=code, message=message),
            start_to_close_timeout=timedelta(seconds=30), retry_policy=DATABASE_RETRY)
        return "aborted"

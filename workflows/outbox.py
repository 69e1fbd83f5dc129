"""The outbox relay and one delivery workflow per entry (seed 002's worker protocol on Temporal).

The seed's lease column and heartbeat become the relay activity's heartbeat timeout: a dead relay
is replaced by Temporal's retry. Its backoff table becomes the handler activity's retry delays,
and its state machine reads in DeliverOutboxEntryWorkflow: handle (the ledger is asked first), then
record succeeded, or aborted with the last error once the attempts are spent.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from pressroom.errors import cause_of
    from activities.outbox import (AbortEntryInput, CompleteEntryInput, EntryInput, OutboxActivities,
                                   RelayInput)

RELAY_WORKFLOW_ID = "outbox-relay"
DATABASE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))


@workflow.defn
class OutboxRelayWorkflow:
    """Runs the relay activity for ever; one per cluster (its id), continued as new to stay small."""

    @workflow.run
    async def run(self, input: RelayInput) -> None:
        for _ in range(20):
            await workflow.execute_activity_method(
                OutboxActivities.relay_outbox, input,
                start_to_close_timeout=timedelta(seconds=input.run_seconds + 60),
                heartbeat_timeout=timedelta(seconds=10), retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)))
        workflow.continue_as_new(input)


@workflow.defn
class DeliverOutboxEntryWorkflow:
    @workflow.run
    async def run(self, input: EntryInput) -> str:
        try:
            handled = await workflow.execute_activity_method(
                OutboxActivities.handle_entry, input, start_to_close_timeout=timedelta(minutes=2),
                heartbeat_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=input.max_attempts), summary="handle")
        except ActivityError as error:
            return await self._abort(input, error)
        if handled.already_succeeded:
            return "succeeded"
        await workflow.execute_activity_method(
            OutboxActivities.complete_entry, CompleteEntryInput(outbox_id=input.outbox_id, result=handled.result),
            start_to_close_timeout=timedelta(seconds=30), retry_policy=DATABASE_RETRY)
        return "succeeded"

    async def _abort(self, input: EntryInput, error: ActivityError) -> str:
        cause = cause_of(error)
        code, message = cause.type or "HANDLER_FAILED", cause.message
        await workflow.execute_activity_method(
            OutboxActivities.abort_entry, AbortEntryInput(outbox_id=input.outbox_id, code=code, message=message),
            start_to_close_timeout=timedelta(seconds=30), retry_policy=DATABASE_RETRY)
        return "aborted"

"""WebhookInboxWorkflow: applies the webhook inbox for ever, as OutboxRelayWorkflow relays the outbox.

One run per task queue (its id); the activity's heartbeat timeout notices a dead worker and
Temporal's retry carries on elsewhere; the run continues as new to keep its history small.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.webhooks import InboxInput, WebhookActivities


@workflow.defn
class WebhookInboxWorkflow:
    @workflow.run
    async def run(self, input: InboxInput) -> None:
        for _ in range(20):
            await workflow.execute_activity_method(
                WebhookActivities.apply_inbox, input,
                start_to_close_timeout=timedelta(seconds=input.run_seconds + 60),
                heartbeat_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)))
        workflow.continue_as_new(input)

"""RecipientRetentionWorkflow: the `recipient-retention` schedule's run folds and drops the recipient
rows of emails older than the retention period (activities/retention.py)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.retention import RetentionActivities, RetentionInput, RetentionResult


@workflow.defn
class RecipientRetentionWorkflow:
    @workflow.run
    async def run(self, input: RetentionInput) -> RetentionResult:
        return await workflow.execute_activity_method(
            RetentionActivities.fold_old_recipients, input, start_to_close_timeout=timedelta(hours=6),
            # A worker that dies mid-fold is noticed in a minute; the next attempt goes on where it stopped.
            heartbeat_timeout=timedelta(minutes=1), retry_policy=RetryPolicy(maximum_attempts=5))

"""PublishPostWorkflow: one durable timer per scheduled post.

No wake-up loop and no look-ahead window: the run sleeps until its post is due, however far ahead,
and a reschedule moves the timer in place. The timer fires `lead_seconds` early so the publish
activity is already running when the time comes; the activity waits out the rest and publishes
only a post still scheduled for that time, so a post is never published early and never twice.
After publishing, the post's newsletter email that no attempt sent is handed to SendNewsletterWorkflow;
when it will not go out, the outcome and the run's details say why.
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from activities.posts.models import (
        PublishPostActivityInput,
        PublishPostInput,
        PublishResult,
        ReconcileResult,
        RescheduleInput,
    )
    from activities.posts.publish import PostsActivities
    from pressroom.temporal import POST_ID, PUBLISH_AT
    from workflows.newsletter import SendNewsletterWorkflow
    from workflows.newsletter_models import SendNewsletterInput, newsletter_workflow_id


# Runs of 0.1.0 retried a dead worker's publish only after a 10 s heartbeat timeout plus 5 s.
PROMPT_RETRY_PATCH = "publish-prompt-retry"
# Runs of 0.3.0 and before asked for the prompt retry when their timer fired, which recorded a patch
# marker (and a search-attribute update) just when every post due at that instant needs Temporal at
# once; runs started since ask once, at their start, when there is time to spare.
PROMPT_RETRY_AT_START_PATCH = "publish-prompt-retry-at-start"
# A schedule that reaches the run after an unschedule it has not yet handled (unschedule, then
# schedule again at once) is the post's latest state: the run goes on to the new time.
RESCHEDULE_REVIVES_PATCH = "reschedule-after-unschedule"
PUBLISH_HEARTBEAT_TIMEOUT = timedelta(seconds=2)  # for runs whose input does not set it


class PublishOutcome(BaseModel):
    post_id: str
    status: str  # published | unscheduled | not_found | not_scheduled
    publish_at: datetime
    newsletter_workflow_id: str | None = None
    newsletter_note: str | None = None  # why the post's newsletter will not go out, when it will not


@workflow.defn
class PublishPostWorkflow:
    def __init__(self) -> None:
        self._publish_at: datetime | None = None
        self._unscheduled = False

    @workflow.signal
    def reschedule(self, input: RescheduleInput) -> None:
        self._publish_at = input.publish_at
        if self._unscheduled and workflow.patched(RESCHEDULE_REVIVES_PATCH):
            self._unscheduled = False

    @workflow.signal
    def unschedule(self) -> None:
        self._unscheduled = True

    @workflow.query
    def publish_at(self) -> datetime | None:
        return self._publish_at

    @workflow.run
    async def run(self, input: PublishPostInput) -> PublishOutcome:
        if self._publish_at is None:  # a signal that came with the start has already set it
            self._publish_at = input.publish_at
        prompt_retry = workflow.patched(PROMPT_RETRY_AT_START_PATCH)
        workflow.upsert_search_attributes([POST_ID.value_set(input.post_id)])
        retry = RetryPolicy(initial_interval=timedelta(seconds=input.retry_seconds), backoff_coefficient=1.0,
                            maximum_attempts=input.retries + 1)
        while True:
            target = self._scheduled()
            workflow.upsert_search_attributes([PUBLISH_AT.value_set(target)])
            workflow.set_current_details(f"publishes at {target.isoformat()}")
            wait = (target - workflow.now()).total_seconds() - input.lead_seconds
            if wait > 0:
                try:
                    await workflow.wait_condition(lambda: self._publish_at != target or self._unscheduled,  # noqa: B023 (read while awaited)
                                                  timeout=timedelta(seconds=wait))
                    if not self._unscheduled:
                        if workflow.info().is_continue_as_new_suggested():
                            # Many moves of a long timer: start afresh with the current time.
                            workflow.continue_as_new(input.model_copy(update={"publish_at": self._publish_at}))
                        continue  # moved: wait for the new time
                except TimeoutError:
                    pass
            if self._unscheduled:
                return self._end(input, "unscheduled")
            if prompt_retry or workflow.patched(PROMPT_RETRY_PATCH):
                # A worker that dies while the activity waits out the lead time is noticed within the
                # heartbeat timeout and the activity is retried at once on any other worker,
                # which still publishes on time; failures the activity reports keep their own
                # interval (it raises them with retry_seconds as next_retry_delay).
                result: PublishResult = await workflow.execute_activity_method(
                    PostsActivities.publish_post,
                    PublishPostActivityInput(post_id=input.post_id, publish_at=target,
                                             lead_seconds=input.lead_seconds, retry_seconds=input.retry_seconds),
                    start_to_close_timeout=timedelta(seconds=input.lead_seconds + 60),
                    heartbeat_timeout=timedelta(seconds=input.heartbeat_seconds) if input.heartbeat_seconds
                    else PUBLISH_HEARTBEAT_TIMEOUT, summary="publish",
                    retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100), backoff_coefficient=1.0,
                                             maximum_attempts=input.retries + 1))
            else:
                result = await workflow.execute_activity_method(
                    PostsActivities.publish_post,
                    PublishPostActivityInput(post_id=input.post_id, publish_at=target,
                                             lead_seconds=input.lead_seconds),
                    start_to_close_timeout=timedelta(seconds=input.lead_seconds + 60),
                    heartbeat_timeout=timedelta(seconds=10), retry_policy=retry, summary="publish")
            if result.status == "moved":
                self._publish_at = result.publish_at  # changed in the database: follow it
                continue
            newsletter = await self._start_newsletter(result.email_id) if result.email_id else None
            return self._end(input, result.status, newsletter, result.newsletter_note)

    async def _start_newsletter(self, email_id: str) -> str:
        """Hand over to the newsletter send; its workflow id keeps it to one send."""
        workflow_id = newsletter_workflow_id(email_id)
        with contextlib.suppress(WorkflowAlreadyStartedError):  # already sending or sent: nothing more to do
            await workflow.start_child_workflow(
                SendNewsletterWorkflow.run, SendNewsletterInput(email_id=email_id), id=workflow_id,
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                static_summary=f"Send email {email_id} after its post was published")
        return workflow_id

    def _scheduled(self) -> datetime:
        """The instant to publish at: set by the start (or a signal that came with it) before the run's loop."""
        assert self._publish_at is not None
        return self._publish_at

    def _end(self, input: PublishPostInput, status: str, newsletter: str | None = None,
             note: str | None = None) -> PublishOutcome:
        details = f"{status} (scheduled for {self._scheduled().isoformat()})"
        workflow.set_current_details(f"{details}\n\nits newsletter will not go out: {note}" if note else details)
        return PublishOutcome(post_id=input.post_id, status=status, publish_at=self._scheduled(),
                              newsletter_workflow_id=newsletter, newsletter_note=note)


@workflow.defn
class ReconcilePostsWorkflow:
    """Run by the `posts-reconcile` schedule and at worker start: rows and workflows in step."""

    @workflow.run
    async def run(self) -> ReconcileResult:
        return await workflow.execute_activity_method(
            PostsActivities.reconcile_posts, start_to_close_timeout=timedelta(minutes=10),
            # A worker that dies mid-reconcile is noticed in a minute, not at the 10-minute timeout.
            heartbeat_timeout=timedelta(minutes=1), retry_policy=RetryPolicy(maximum_attempts=5))

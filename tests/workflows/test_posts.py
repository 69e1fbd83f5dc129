"""PublishPostWorkflow and ReconcilePostsWorkflow's decisions: the timer fires a lead time early,
signals move or cancel it, a post moved in the database is followed.

The handoff to the newsletter send (a child workflow) is tested end to end in tests/posts: after a
child workflow the time-skipping test server stops skipping time for the tests that follow."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest
from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities.posts.models import PublishPostActivityInput, PublishResult, ReconcileResult, publish_workflow_id
from tests.workflows.conftest import worker_for, workflow_id
from workflows.posts import (
    PublishPostInput,
    PublishPostWorkflow,
    ReconcilePostsWorkflow,
    RescheduleInput,
)

LEAD = 10.0


class FakePublishing:
    """publish_post answering from a script of results; records when (server time) it was called."""

    def __init__(self, env, *answers: PublishResult | BaseException) -> None:
        self.env = env
        self.answers = list(answers) or [PublishResult(status="published")]
        self.calls: list[tuple[datetime, datetime]] = []  # (publish_at asked, server time of the call)

    @activity.defn(name="publish_post")
    async def publish_post(self, input: PublishPostActivityInput) -> PublishResult:
        assert input.lead_seconds == LEAD
        self.calls.append((input.publish_at, await self.env.get_current_time()))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


async def start_publication(env, task_queue: str, post_id: str, publish_at: datetime, **options):
    return await env.client.start_workflow(
        PublishPostWorkflow.run, PublishPostInput(post_id=post_id, publish_at=publish_at, lead_seconds=LEAD,
                                                  **options),
        id=publish_workflow_id(post_id), task_queue=task_queue)


def post_id() -> str:
    return workflow_id("post")


async def test_the_post_is_published_a_lead_time_before_its_time(env):
    fake = FakePublishing(env)
    at = await env.get_current_time() + timedelta(days=30)
    async with worker_for(env, [PublishPostWorkflow], [fake.publish_post]) as task_queue:
        handle = await start_publication(env, task_queue, post := post_id(), at)
        assert await handle.query(PublishPostWorkflow.publish_at) == at
        outcome = await handle.result()
    assert (outcome.post_id, outcome.status, outcome.publish_at, outcome.newsletter_workflow_id) == (
        post, "published", at, None)
    [(asked, called_at)] = fake.calls
    assert asked == at
    assert at - timedelta(seconds=LEAD + 5) <= called_at <= at, "the timer fires the lead time early, not before"


@pytest.mark.parametrize("first_days, second_days", [(30, 10), (10, 30)])
async def test_a_reschedule_signal_moves_the_timer(env, first_days, second_days):
    fake = FakePublishing(env)
    now = await env.get_current_time()
    first, second = now + timedelta(days=first_days), now + timedelta(days=second_days)
    async with worker_for(env, [PublishPostWorkflow], [fake.publish_post]) as task_queue:
        handle = await start_publication(env, task_queue, post_id(), first)
        await handle.signal(PublishPostWorkflow.reschedule, RescheduleInput(publish_at=second))
        outcome = await handle.result()
    assert outcome.publish_at == second
    assert [asked for asked, _ in fake.calls] == [second], "published once, at the new time"
    assert fake.calls[0][1] >= second - timedelta(seconds=LEAD + 5)


async def test_a_reschedule_that_came_with_the_start_wins(env):
    """Signal-with-start: the run begins with the signal's time, not the input's."""
    fake = FakePublishing(env)
    now = await env.get_current_time()
    async with worker_for(env, [PublishPostWorkflow], [fake.publish_post]) as task_queue:
        handle = await env.client.start_workflow(
            PublishPostWorkflow.run, PublishPostInput(post_id=post_id(), publish_at=now + timedelta(days=5),
                                                      lead_seconds=LEAD),
            id=publish_workflow_id(workflow_id("post")), task_queue=task_queue, start_signal="reschedule",
            start_signal_args=[RescheduleInput(publish_at=now + timedelta(days=2))])
        outcome = await handle.result()
    assert outcome.publish_at == now + timedelta(days=2)


async def test_unschedule_ends_the_run_without_publishing(env):
    fake = FakePublishing(env)
    at = await env.get_current_time() + timedelta(days=30)
    async with worker_for(env, [PublishPostWorkflow], [fake.publish_post]) as task_queue:
        handle = await start_publication(env, task_queue, post_id(), at)
        await handle.signal(PublishPostWorkflow.unschedule)
        outcome = await handle.result()
    assert outcome.status == "unscheduled" and fake.calls == []


async def test_a_schedule_after_an_unschedule_not_yet_handled_publishes_at_the_new_time(env):
    """Unschedule, then schedule again at once: both signals reach the run in one workflow task, and
    the latest (the post scheduled, as its row says) wins."""
    fake = FakePublishing(env)
    now = await env.get_current_time()
    first, again = now + timedelta(days=3), now + timedelta(days=4)
    task_queue = f"fast-{workflow_id('idle')}"
    handle = await start_publication(env, task_queue, post_id(), first)  # no worker polls it yet
    await handle.signal(PublishPostWorkflow.unschedule)
    await handle.signal(PublishPostWorkflow.reschedule, RescheduleInput(publish_at=again))
    async with Worker(env.client, task_queue=task_queue, workflows=[PublishPostWorkflow],
                      activities=[fake.publish_post]):
        outcome = await handle.result()
    assert (outcome.status, outcome.publish_at) == ("published", again)
    assert [asked for asked, _ in fake.calls] == [again]


async def test_an_unschedule_after_a_schedule_not_yet_handled_still_ends_the_run(env):
    fake = FakePublishing(env)
    now = await env.get_current_time()
    task_queue = f"fast-{workflow_id('idle')}"
    handle = await start_publication(env, task_queue, post_id(), now + timedelta(days=3))
    await handle.signal(PublishPostWorkflow.reschedule, RescheduleInput(publish_at=now + timedelta(days=4)))
    await handle.signal(PublishPostWorkflow.unschedule)
    async with Worker(env.client, task_queue=task_queue, workflows=[PublishPostWorkflow],
                      activities=[fake.publish_post]):
        outcome = await handle.result()
    assert outcome.status == "unscheduled" and fake.calls == []


async def test_a_post_moved_in_the_database_is_followed_to_its_new_time(env):
    now = await env.get_current_time()
    first, moved = now + timedelta(hours=1), now + timedelta(hours=5)
    fake = FakePublishing(env, PublishResult(status="moved", publish_at=moved), PublishResult(status="published"))
    async with worker_for(env, [PublishPostWorkflow], [fake.publish_post]) as task_queue:
        outcome = await (await start_publication(env, task_queue, post_id(), first)).result()
    assert [asked for asked, _ in fake.calls] == [first, moved]
    assert fake.calls[1][1] >= moved - timedelta(seconds=LEAD + 5), "it waited for the new time"
    assert (outcome.status, outcome.publish_at) == ("published", moved)


@pytest.mark.parametrize("status", ["not_found", "not_scheduled"])
async def test_a_post_gone_or_no_longer_scheduled_ends_the_run(env, status):
    fake = FakePublishing(env, PublishResult(status=status))
    at = await env.get_current_time() + timedelta(minutes=5)
    async with worker_for(env, [PublishPostWorkflow], [fake.publish_post]) as task_queue:
        outcome = await (await start_publication(env, task_queue, post_id(), at)).result()
    assert outcome.status == status and outcome.newsletter_workflow_id is None


async def test_a_publish_that_keeps_failing_fails_the_run_after_its_retries(env):
    fake = FakePublishing(env, ApplicationError("database unavailable", type="DatabaseUnavailable"))
    at = await env.get_current_time() + timedelta(minutes=5)
    async with worker_for(env, [PublishPostWorkflow], [fake.publish_post]) as task_queue:
        handle = await start_publication(env, task_queue, post_id(), at, retries=2, retry_seconds=5)
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    # The interval between attempts is the activity's own (its next_retry_delay), not tested here.
    assert len(fake.calls) == 3, "the first attempt and `retries` more"


@pytest.mark.parametrize("heartbeat_seconds, expected", [(None, 2.0), (10.0, 10.0)])
async def test_the_waiting_publish_is_watched_by_the_runs_heartbeat_timeout(env, heartbeat_seconds, expected):
    """The heartbeat timeout is how soon a dead worker's waiting publish is retried elsewhere; runs
    started before it was a setting (no value in their input) keep 2 s."""
    seen: list[timedelta | None] = []

    @activity.defn(name="publish_post")
    async def publish_post(input: PublishPostActivityInput) -> PublishResult:
        seen.append(activity.info().heartbeat_timeout)
        return PublishResult(status="published")

    at = await env.get_current_time() + timedelta(minutes=5)
    async with worker_for(env, [PublishPostWorkflow], [publish_post]) as task_queue:
        handle = await start_publication(env, task_queue, post_id(), at, heartbeat_seconds=heartbeat_seconds)
        await handle.result()
    assert seen == [timedelta(seconds=expected)]


async def test_nothing_but_the_publish_is_asked_of_temporal_when_the_timer_fires(env):
    """Every post due at one instant needs Temporal at once when its timer fires: the run's patch
    marker (and the search-attribute update that comes with one) is recorded at its start instead."""
    fake = FakePublishing(env)
    at = await env.get_current_time() + timedelta(minutes=5)
    async with worker_for(env, [PublishPostWorkflow], [fake.publish_post]) as task_queue:
        handle = await start_publication(env, task_queue, post_id(), at)
        await handle.result()
    events = [event.WhichOneof("attributes") for event in (await handle.fetch_history()).events]
    fired = events.index("timer_fired_event_attributes")
    assert "marker_recorded_event_attributes" in events[:fired]
    after = events[fired:events.index("activity_task_scheduled_event_attributes")]
    assert "marker_recorded_event_attributes" not in after
    assert "upsert_workflow_search_attributes_event_attributes" not in after


class FakeReconcile:
    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.attempts = 0
        self.heartbeat_timeout: timedelta | None = None

    @activity.defn(name="reconcile_posts")
    async def reconcile_posts(self) -> ReconcileResult:
        self.attempts += 1
        self.heartbeat_timeout = activity.info().heartbeat_timeout
        if self.attempts <= self.failures:
            raise RuntimeError("Temporal list_workflows timed out")
        return ReconcileResult(started_or_moved=3, stopped=1)


async def test_reconcile_answers_its_activitys_counts_after_retrying_a_failure(env):
    fake = FakeReconcile(failures=1)
    async with worker_for(env, [ReconcilePostsWorkflow], [fake.reconcile_posts]) as task_queue:
        result = await env.client.execute_workflow(ReconcilePostsWorkflow.run, id=workflow_id("posts-reconcile"),
                                                   task_queue=task_queue)
    assert result == ReconcileResult(started_or_moved=3, stopped=1)
    assert fake.attempts == 2
    assert fake.heartbeat_timeout is not None, "a reconcile of many posts is watched by a heartbeat timeout"


async def test_a_query_answers_the_current_time_after_a_move(env):
    fake = FakePublishing(env)
    now = await env.get_current_time()
    async with worker_for(env, [PublishPostWorkflow], [fake.publish_post]) as task_queue:
        handle = await start_publication(env, task_queue, post_id(), now + timedelta(days=3))
        await handle.signal(PublishPostWorkflow.reschedule, RescheduleInput(publish_at=now + timedelta(days=4)))
        for _ in range(50):  # the signal is handled by the next workflow task
            if await handle.query(PublishPostWorkflow.publish_at) == now + timedelta(days=4):
                break
            await asyncio.sleep(0.05)
        assert await handle.query(PublishPostWorkflow.publish_at) == now + timedelta(days=4)
        await handle.signal(PublishPostWorkflow.unschedule)
        await handle.result()

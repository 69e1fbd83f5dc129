"""Scheduled posts: the timer, moves, unscheduling, deletion, a database outage, and the handoff."""

from __future__ import annotations

import asyncio
import signal
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.worker import Replayer

from activities.posts.models import publish_workflow_id
from operations.posts import reconcile_posts, schedule_post, unschedule_post
from operations.waiting import fresh_pollers
from pressroom.temporal import PUBLISH_AT, data_converter
from tests.conftest import make_settings
from tests.foundation.test_cli import assert_one_line_error, pressroom
from tests.newsletter.conftest import seed_email
from tests.newsletter.test_failures import spawn_worker, wait_until
from tests.newsletter.test_send import delivered
from worker import running_worker
from workflows.newsletter import SendNewsletterWorkflow
from workflows.posts import PublishPostWorkflow


async def seed_post(db) -> str:
    tag = uuid.uuid4().hex[:8]
    return await db.fetchval("INSERT INTO posts (title, slug) VALUES ('A post', $1) RETURNING id", f"post-{tag}")


def soon(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


async def later(env, seconds: float) -> str:
    """A time relative to the server's clock: the time-skipping server's runs ahead of ours."""
    return (await env.get_current_time() + timedelta(seconds=seconds)).isoformat()


@pytest.fixture
async def posts_env(time_skipping_env, postgres_url, mailgun, db):
    settings = make_settings(postgres_url, mailgun, publish_lead_seconds=0.2)
    async with running_worker(time_skipping_env.client, settings):
        yield time_skipping_env, settings


async def outcome(env, post_id: str):
    """The run's result; on the time-skipping server, timers are skipped while we wait for it."""
    handle = env.client.get_workflow_handle_for(PublishPostWorkflow.run, publish_workflow_id(post_id))
    unlocked = getattr(env, "time_skipping_unlocked", None)
    if unlocked is None:
        return await handle.result()
    async with unlocked():
        return await handle.result()


async def test_a_post_publishes_at_its_time(db, posts_env):
    env, settings = posts_env
    client = env.client
    post_id = await seed_post(db)
    at = await schedule_post(post_id, await later(env, 3600), client=client, settings=settings)
    result = await outcome(env, post_id)
    assert result.status == "published" and result.publish_at == at
    row = await db.fetchrow("SELECT status, published_at, publish_completed_at FROM posts WHERE id = $1", post_id)
    assert row["status"] == "published" and row["published_at"] == at and row["publish_completed_at"]


@pytest.mark.parametrize("first, second", [(3600, 7200), (7200, 3600)])
async def test_a_reschedule_moves_the_timer_later_or_earlier(db, posts_env, first, second):
    env, settings = posts_env
    client = env.client
    post_id = await seed_post(db)
    await schedule_post(post_id, await later(env, first), client=client, settings=settings)
    moved = await schedule_post(post_id, await later(env, second), client=client, settings=settings)
    result = await outcome(env, post_id)
    assert result.status == "published" and result.publish_at == moved


async def test_unschedule_ends_the_timer_without_publishing(db, posts_env):
    env, settings = posts_env
    client = env.client
    post_id = await seed_post(db)
    await schedule_post(post_id, await later(env, 3600), client=client, settings=settings)
    await unschedule_post(post_id, client=client, settings=settings)
    assert (await outcome(env, post_id)).status == "unscheduled"
    assert await db.fetchval("SELECT status FROM posts WHERE id = $1", post_id) == "draft"


async def test_a_year_ahead_and_a_past_time_both_publish(db, posts_env):
    env, settings = posts_env
    client = env.client
    ahead, past = await seed_post(db), await seed_post(db)
    await schedule_post(ahead, await later(env, 366 * 86400), client=client, settings=settings)
    await schedule_post(past, await later(env, -3600), client=client, settings=settings)
    assert (await outcome(env, past)).status == "published"
    assert (await outcome(env, ahead)).status == "published"


async def test_two_racing_reschedules_publish_once_at_the_time_that_won(db, posts_env):
    env, settings = posts_env
    client = env.client
    post_id = await seed_post(db)
    await schedule_post(post_id, await later(env, 3600), client=client, settings=settings)
    await asyncio.gather(schedule_post(post_id, await later(env, 5000), client=client, settings=settings),
                         schedule_post(post_id, await later(env, 6000), client=client, settings=settings))
    result = await outcome(env, post_id)
    row = await db.fetchrow("SELECT status, published_at FROM posts WHERE id = $1", post_id)
    assert result.status == "published" and row["status"] == "published"
    assert result.publish_at == row["published_at"]


async def test_a_post_deleted_before_its_time_ends_as_not_found(db, posts_env):
    env, settings = posts_env
    client = env.client
    post_id = await seed_post(db)
    await schedule_post(post_id, await later(env, 3600), client=client, settings=settings)
    await db.execute("DELETE FROM posts WHERE id = $1", post_id)
    assert (await outcome(env, post_id)).status == "not_found"


async def test_a_time_changed_in_the_database_is_followed(db, posts_env):
    env, settings = posts_env
    client = env.client
    post_id = await seed_post(db)
    await schedule_post(post_id, await later(env, 3600), client=client, settings=settings)
    moved = (await env.get_current_time()).replace(microsecond=0) + timedelta(hours=3)
    await db.execute("UPDATE posts SET published_at = $2 WHERE id = $1", post_id, moved)
    result = await outcome(env, post_id)
    assert result.status == "published" and result.publish_at == moved


async def test_the_database_down_at_the_time_is_retried_until_it_is_back(db, dev_env, postgres_url, mailgun):
    settings = make_settings(postgres_url, mailgun, publish_lead_seconds=0.2, publish_retry_seconds=0.3)
    post_id = await seed_post(db)
    async with running_worker(dev_env.client, settings):
        await schedule_post(post_id, soon(1), client=dev_env.client, settings=settings)
        await db.execute("ALTER TABLE posts RENAME TO posts_offline")  # every query on posts now fails
        try:
            handle = dev_env.client.get_workflow_handle(publish_workflow_id(post_id))

            async def retrying() -> bool:
                pending = (await handle.describe()).raw_description.pending_activities
                return bool(pending) and pending[0].attempt >= 3
            await wait_until(retrying, timeout=30)
        finally:
            await db.execute("ALTER TABLE posts_offline RENAME TO posts")
        assert (await outcome(dev_env, post_id)).status == "published"


async def test_a_published_post_with_a_newsletter_sends_it_once(db, mailgun, dev_env, postgres_url):
    settings = make_settings(postgres_url, mailgun, publish_lead_seconds=0.2)
    seeded = await seed_email(db, members=25, post_status="draft")
    async with running_worker(dev_env.client, settings):
        await schedule_post(seeded.post_id, soon(1), client=dev_env.client, settings=settings)
        result = await outcome(dev_env, seeded.post_id)
        assert result.newsletter_workflow_id == f"newsletter-{seeded.email_id}"
        sent = await dev_env.client.get_workflow_handle_for(SendNewsletterWorkflow.run,
                                                            result.newsletter_workflow_id).result()
    assert sent.status == "submitted"
    counts = delivered(mailgun, seeded.email_id)
    assert len(counts) == 25 and set(counts.values()) == {1}
    history = await dev_env.client.get_workflow_handle(publish_workflow_id(seeded.post_id)).fetch_history()
    await Replayer(workflows=[PublishPostWorkflow], data_converter=data_converter()).replay_workflow(history)


async def test_reconcile_starts_posts_scheduled_directly_in_sql(db, dev_env, postgres_url, mailgun):
    settings = make_settings(postgres_url, mailgun, publish_lead_seconds=0.2)
    post_ids = [await seed_post(db) for _ in range(3)]
    at = datetime.now(UTC) + timedelta(seconds=2)
    await db.execute("UPDATE posts SET status = 'scheduled', published_at = $1 WHERE id = ANY($2)", at, post_ids)
    result = await reconcile_posts(client=dev_env.client, settings=settings)
    assert result.started_or_moved == 3
    async with running_worker(dev_env.client, settings):
        for post_id in post_ids:
            assert (await outcome(dev_env, post_id)).status == "published"
    rows = await db.fetch("SELECT published_at, publish_completed_at FROM posts WHERE id = ANY($1)", post_ids)
    assert all(row["publish_completed_at"] >= row["published_at"] for row in rows)  # never early


async def test_a_publish_run_terminated_leaves_its_post_scheduled_and_the_reconcile_arms_it_again(
        db, dev_env, postgres_url, mailgun):
    """The watchdog's post case (docs/operating.md "Every end is recorded"): the row is true as it is, and the
    reconcile (every 10 minutes, and at worker start) starts its timer again."""
    settings = make_settings(postgres_url, mailgun, publish_lead_seconds=0.2)
    post_id = await seed_post(db)
    async with running_worker(dev_env.client, settings):
        await schedule_post(post_id, soon(3), client=dev_env.client, settings=settings)
        handle = dev_env.client.get_workflow_handle(publish_workflow_id(post_id))
        await handle.terminate(reason="an operator stops it")
        assert await db.fetchval("SELECT status FROM posts WHERE id = $1", post_id) == "scheduled"

        async def not_running() -> bool:  # the visibility store, which the reconcile reads, has caught up
            return not [w async for w in dev_env.client.list_workflows(
                f"WorkflowId = '{handle.id}' AND ExecutionStatus = 'Running'")]
        await wait_until(not_running)
        result = await reconcile_posts(client=dev_env.client, settings=settings)
        assert result.started_or_moved == 1
        assert (await outcome(dev_env, post_id)).status == "published"
    assert await db.fetchval("SELECT status FROM posts WHERE id = $1", post_id) == "published"


async def test_reconcile_leaves_a_timer_that_is_right_alone(db, dev_env, postgres_url, mailgun):
    """A year-long timer reconciled every 10 minutes must not fill its history with signals."""
    settings = make_settings(postgres_url, mailgun)
    post_id = await seed_post(db)
    async with running_worker(dev_env.client, settings):
        await schedule_post(post_id, soon(365 * 86400), client=dev_env.client, settings=settings)
        handle = dev_env.client.get_workflow_handle(publish_workflow_id(post_id))

        async def visible() -> bool:  # the visibility store catches up with the run's PublishAt
            runs = [w async for w in dev_env.client.list_workflows(f"WorkflowId = '{handle.id}'")]
            return bool(runs) and runs[0].typed_search_attributes.get(PUBLISH_AT) is not None
        await wait_until(visible)
        events = len((await handle.fetch_history()).events)
        result = await reconcile_posts(client=dev_env.client, settings=settings)
        # The reconcile reads every publish run on the session's server: another test's timer whose
        # post this test's empty database no longer holds may be stopped; this one is left alone.
        assert result.started_or_moved == 0
        assert len((await handle.fetch_history()).events) == events
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        await handle.terminate()


@pytest.mark.crash
async def test_a_worker_killed_while_posts_wait_publishes_each_once_after_restart(db, dev_env, postgres_url,
                                                                                  mailgun):
    settings = make_settings(postgres_url, mailgun)
    post_ids = [await seed_post(db) for _ in range(5)]
    worker = spawn_worker(settings, dev_env, PRESSROOM_PUBLISH_LEAD_SECONDS="1")
    for post_id in post_ids:
        await schedule_post(post_id, soon(6), client=dev_env.client, settings=settings)
    await asyncio.sleep(2)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    worker = spawn_worker(settings, dev_env, PRESSROOM_PUBLISH_LEAD_SECONDS="1")
    try:
        results = [await outcome(dev_env, post_id) for post_id in post_ids]
    finally:
        worker.terminate()
        worker.wait()
    assert {r.status for r in results} == {"published"}
    rows = await db.fetch("SELECT published_at, publish_completed_at FROM posts WHERE id = ANY($1)", post_ids)
    assert len(rows) == 5 and all(row["publish_completed_at"] >= row["published_at"] for row in rows)


@pytest.mark.crash
async def test_a_worker_killed_10s_before_a_post_is_due_is_replaced_and_the_post_publishes_on_time(
        db, dev_env, postgres_url, mailgun):
    """Two workers; the one whose publish activity waits out the lead time is killed 10 s before the
    time and restarted at once. The dead attempt is noticed within the default 5 s heartbeat timeout
    and retried at once on a live worker, which still sleeps to the exact time."""
    # The default heartbeat timeout; a lead of 20 s, not 30, still leaves 10 s for the timer's firing
    # to reach a worker before the kill (loaded machines take a few), and the kill 10 s before the time.
    settings = make_settings(postgres_url, mailgun, publish_lead_seconds=20)
    post_id = await seed_post(db)
    workers = {}
    for _ in range(2):
        process = spawn_worker(settings, dev_env)
        workers[process.pid] = process

    async def both_polling() -> bool:
        pollers = await fresh_pollers(dev_env.client, settings.task_queue, activities=True) or []
        return {int(identity.split("@")[0]) for identity in pollers} >= set(workers)
    await wait_until(both_polling, timeout=120)
    due = datetime.now(UTC) + timedelta(seconds=24)  # counted from workers that are ready, however slow their start
    await schedule_post(post_id, due.isoformat(), client=dev_env.client, settings=settings)
    handle = dev_env.client.get_workflow_handle(publish_workflow_id(post_id))

    async def waiting() -> bool:
        pending = (await handle.describe()).raw_description.pending_activities
        return bool(pending) and pending[0].activity_type.name == "publish_post" and pending[0].HasField(
            "last_started_time")
    try:
        await wait_until(waiting, timeout=20)
        assert datetime.now(UTC) < due - timedelta(seconds=10), "the publish started too late to test this"
        holder = int((await handle.describe()).raw_description.pending_activities[0].last_worker_identity
                     .split("@")[0])
        await asyncio.sleep((due - timedelta(seconds=10) - datetime.now(UTC)).total_seconds())
        workers[holder].send_signal(signal.SIGKILL)
        workers.pop(holder).wait()
        restarted = spawn_worker(settings, dev_env)
        workers[restarted.pid] = restarted
        result = await outcome(dev_env, post_id)
    finally:
        for process in workers.values():
            process.terminate()
            process.wait()
    assert result.status == "published"
    row = await db.fetchrow("SELECT published_at, publish_completed_at FROM posts WHERE id = $1", post_id)
    lateness = (row["publish_completed_at"] - row["published_at"]).total_seconds()
    started = [e for e in (await handle.fetch_history()).events if e.HasField("activity_task_started_event_attributes")]
    attempt = started[-1].activity_task_started_event_attributes.attempt
    print(f"\nworker killed 10 s before the time, restarted at once, another worker there: published "
          f"{lateness * 1000:.0f} ms after its time, by attempt {attempt}")
    assert attempt >= 2  # the kill did land on the waiting attempt
    assert lateness >= 0  # never early


async def test_a_start_temporal_refuses_leaves_the_post_as_it_was(db, dev_env, postgres_url, mailgun):
    from temporalio.client import Client

    from pressroom.errors import PressroomError

    settings = make_settings(postgres_url, mailgun)
    post_id = await seed_post(db)
    refusing = await Client.connect(dev_env.client.service_client.config.target_host, namespace="no-such-namespace")
    with pytest.raises(PressroomError, match=r"was not changed \(it is still draft\).*NOT_FOUND"):
        await schedule_post(post_id, soon(3600), client=refusing, settings=settings)
    row = await db.fetchrow("SELECT status, published_at FROM posts WHERE id = $1", post_id)
    assert row["status"] == "draft" and row["published_at"] is None


async def test_a_commit_that_fails_after_the_workflow_was_told_puts_the_workflow_back(db, dev_env, postgres_url,
                                                                                       mailgun):
    from pressroom.errors import PressroomError

    settings = make_settings(postgres_url, mailgun)
    post_id = await seed_post(db)
    # A deferred check runs at COMMIT, after the workflow was started: the commit fails.
    await db.execute("CREATE FUNCTION refuse_commit() RETURNS trigger LANGUAGE plpgsql AS "
                     "$$ BEGIN RAISE EXCEPTION 'refused at commit'; END $$")
    await db.execute("CREATE CONSTRAINT TRIGGER refuse_commit AFTER UPDATE ON posts DEFERRABLE INITIALLY DEFERRED "
                     "FOR EACH ROW EXECUTE FUNCTION refuse_commit()")
    try:
        with pytest.raises(PressroomError, match=r"did not commit.*its workflow was put back"):
            await schedule_post(post_id, soon(3600), client=dev_env.client, settings=settings)
    finally:
        await db.execute("DROP TRIGGER refuse_commit ON posts")
        await db.execute("DROP FUNCTION refuse_commit()")
    assert await db.fetchval("SELECT status FROM posts WHERE id = $1", post_id) == "draft"
    handle = dev_env.client.get_workflow_handle(publish_workflow_id(post_id))
    signals = [e.workflow_execution_signaled_event_attributes.signal_name for e in (await handle.fetch_history()).events
               if e.HasField("workflow_execution_signaled_event_attributes")]
    await handle.terminate()  # no worker serves this test's queue; leave no run for the reconcile tests
    assert signals == ["reschedule", "unschedule"]


@pytest.mark.parametrize("at, words", [("2026-12-01T09:00:00", "needs a UTC offset"),
                                       ("next tuesday", "not an ISO 8601 time")])
def test_bad_times_are_refused_in_one_line(at, words):
    assert_one_line_error(pressroom("posts", "schedule", "p1", "--at", at), words)


async def test_an_unknown_post_is_refused_and_nothing_starts(postgres_url, dev_env, db):
    result = await asyncio.to_thread(pressroom, "posts", "schedule", "no-such-post", "--at", soon(60),
                                     env={"DATABASE_URL": postgres_url,
                                          "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host})
    assert_one_line_error(result, "post no-such-post does not exist")


async def test_posts_due_at_the_same_instant_are_published_by_one_statement_each_with_its_guard(db):
    from activities.posts.publish import DueTogether

    at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    due = [await seed_post(db) for _ in range(3)]
    moved = await seed_post(db)
    await db.execute("UPDATE posts SET status = 'scheduled', published_at = $2 WHERE id = ANY($1::text[])", due, at)
    await db.execute("UPDATE posts SET status = 'scheduled', published_at = $2 WHERE id = $1", moved,
                     at + timedelta(minutes=5))
    together = DueTogether(db)
    rows = await asyncio.gather(*(together.publish(post_id, at) for post_id in [*due, moved, due[0]]))
    assert [row is not None for row in rows] == [True, True, True, False, True]
    assert rows[4]["publish_completed_at"] == rows[0]["publish_completed_at"]  # the same post asked twice
    published = await db.fetch("SELECT id, status, xmin::text AS tx FROM posts WHERE id = ANY($1::text[])",
                               [*due, moved])
    by_id = {row["id"]: row for row in published}
    assert {by_id[post_id]["status"] for post_id in due} == {"published"} and by_id[moved]["status"] == "scheduled"
    assert len({by_id[post_id]["tx"] for post_id in due}) == 1  # one transaction wrote all three
    # Asked again, a published post is not published twice.
    assert await together.publish(due[1], at) is None


async def test_an_early_send_is_refused_and_the_newsletter_goes_out_once_when_the_post_publishes(
        db, mailgun, dev_env, postgres_url):
    from temporalio.service import RPCError

    from operations.newsletter import start_newsletter
    from pressroom.errors import BadInput

    settings = make_settings(postgres_url, mailgun, publish_lead_seconds=0.2)
    seeded = await seed_email(db, members=25, post_status="draft")
    with pytest.raises(BadInput, match=f"its post {seeded.post_id} is a draft"):
        await start_newsletter(seeded.email_id, client=dev_env.client, settings=settings)
    async with running_worker(dev_env.client, settings):
        at = await schedule_post(seeded.post_id, soon(2), client=dev_env.client, settings=settings)
        with pytest.raises(BadInput, match=f"scheduled for {at:%Y-%m-%d %H:%M:%S} UTC"):
            await start_newsletter(seeded.email_id, client=dev_env.client, settings=settings)
        # Refused without writing anything: the email is as it was, and no send was started.
        email = await db.fetchrow("SELECT status, error, locked_by FROM emails WHERE id = $1", seeded.email_id)
        assert dict(email) == {"status": "pending", "error": None, "locked_by": None}
        with pytest.raises(RPCError):
            await dev_env.client.get_workflow_handle(f"newsletter-{seeded.email_id}").describe()
        result = await outcome(dev_env, seeded.post_id)
        assert result.status == "published" and result.newsletter_note is None
        sent = await dev_env.client.get_workflow_handle_for(SendNewsletterWorkflow.run,
                                                            result.newsletter_workflow_id).result()
    assert sent.status == "submitted"
    counts = delivered(mailgun, seeded.email_id)
    assert len(counts) == 25 and set(counts.values()) == {1}
    times = await db.fetchrow("SELECT p.publish_completed_at, e.submitted_at FROM posts p JOIN emails e "
                              "ON e.post_id = p.id WHERE p.id = $1", seeded.post_id)
    assert times["publish_completed_at"] >= at and times["submitted_at"] >= times["publish_completed_at"]


async def test_an_email_an_earlier_send_left_failed_goes_out_when_its_post_publishes(db, mailgun, dev_env,
                                                                                      postgres_url):
    """A send started straight on Temporal (as before the refusal) fails the email of a scheduled post;
    the publication still sends it, once."""
    from temporalio.client import WorkflowFailureError

    from workflows.newsletter_models import SendNewsletterInput

    settings = make_settings(postgres_url, mailgun, publish_lead_seconds=0.2)
    seeded = await seed_email(db, members=5, post_status="draft")
    async with running_worker(dev_env.client, settings):
        await schedule_post(seeded.post_id, soon(3), client=dev_env.client, settings=settings)
        with pytest.raises(WorkflowFailureError):
            await dev_env.client.execute_workflow(
                SendNewsletterWorkflow.run, SendNewsletterInput(email_id=seeded.email_id),
                id=f"newsletter-{seeded.email_id}", task_queue=settings.task_queue)
        assert await db.fetchval("SELECT status FROM emails WHERE id = $1", seeded.email_id) == "failed"
        result = await outcome(dev_env, seeded.post_id)
        assert result.newsletter_workflow_id == f"newsletter-{seeded.email_id}"
        sent = await dev_env.client.get_workflow_handle_for(SendNewsletterWorkflow.run,
                                                            result.newsletter_workflow_id).result()
    assert sent.status == "submitted"
    counts = delivered(mailgun, seeded.email_id)
    assert len(counts) == 5 and set(counts.values()) == {1}


async def test_a_published_post_whose_newsletter_will_not_go_out_says_so_and_why(db, mailgun, dev_env, postgres_url):
    from operations.finding import list_page
    from operations.posts import posts_status

    settings = make_settings(postgres_url, mailgun, publish_lead_seconds=0.2)
    seeded = await seed_email(db, members=1, post_status="draft")
    await db.execute("DELETE FROM emails WHERE id = $1", seeded.email_id)  # a newsletter post with no email
    async with running_worker(dev_env.client, settings):
        await schedule_post(seeded.post_id, soon(1), client=dev_env.client, settings=settings)
        result = await outcome(dev_env, seeded.post_id)
    assert result.status == "published" and result.newsletter_workflow_id is None
    assert result.newsletter_note == "its post is published but has no email to send"
    status = await posts_status(seeded.post_id, client=dev_env.client, settings=settings)
    assert status["email"] == {"email_id": None, "status": None, "will_not_go_out": result.newsletter_note}
    overview = await posts_status(client=dev_env.client, settings=settings)
    assert {"post_id": seeded.post_id, "why": result.newsletter_note} in overview["newsletter_not_going"]

    # An email that failed after its post was published: the list says it will not go out, and why.
    other = await seed_email(db, members=1)
    await db.execute("UPDATE emails SET status = 'failed', error = 'The email failed to send.' WHERE id = $1",
                     other.email_id)
    page = await list_page("email", newsletter=other.newsletter_id, settings=settings)
    [row] = page.items
    assert row.will_not_go_out == (f"its post is published but email {other.email_id} failed: "
                                      "The email failed to send.")

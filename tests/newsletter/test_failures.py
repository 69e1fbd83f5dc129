"""Faults on the way: Mailgun errors, lost answers, refused batches, and a worker that dies."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client
from temporalio.worker import Replayer

from activities.newsletter.batches import CHUNK_BATCHES
from operations.newsletter import follow_newsletter, start_newsletter
from pressroom.temporal import data_converter
from tests.adversaries import each_adversary, play
from worker import running_worker
from workflows.newsletter import SendNewsletterWorkflow

from .conftest import refused_by_mailgun, seed_email
from .test_send import delivered

ROOT = Path(__file__).resolve().parents[2]


async def send_and_follow(client, settings, email_id: str):
    """Start (or start again) the send and follow it to the end; returns the outcome and every progress seen."""
    seen = []
    start = await start_newsletter(email_id, client=client, settings=settings)
    outcome = await follow_newsletter(start.workflow_id, client=client, on_progress=seen.append, poll_seconds=0.1)
    return outcome, seen


async def assert_each_member_once(db, mailgun, email_id: str) -> None:
    """Every recipient of the email accepted by the provider exactly once, and nobody else."""
    eligible = {r["member_email"] for r in await db.fetch(
        "SELECT member_email FROM email_recipients WHERE email_id = $1", email_id)}
    counts = delivered(mailgun, email_id)
    assert set(counts) == eligible, f"{len(eligible - set(counts))} missing"
    assert [a for a, n in counts.items() if n > 1] == [], "second copies"


@each_adversary
async def test_5xx_and_429_every_member_once(adversary, db, mailgun, dev_env, newsletter_settings):
    settings = newsletter_settings(batch_size=50, provider_retry_seconds=0.5)
    seeded = await seed_email(db, members=1000)
    play(mailgun, adversary, error_rate=0.1, rate_limit_rate=0.1, retry_after_seconds=1, seed=3)
    async with running_worker(dev_env.client, settings):
        outcome, _ = await send_and_follow(dev_env.client, settings, seeded.email_id)
    assert outcome.status == "submitted" and outcome.counts.batches_submitted == 20
    await assert_each_member_once(db, mailgun, seeded.email_id)
    assert mailgun.stats()["requests"]["messages"] > 20  # the faults really happened


@each_adversary
async def test_lost_answers_are_confirmed_not_resent(adversary, db, mailgun, dev_env, newsletter_settings):
    settings = newsletter_settings(batch_size=50, provider_retry_seconds=0.5)
    seeded = await seed_email(db, members=1000)
    play(mailgun, adversary, lost_response_rate=0.1, seed=5)
    async with running_worker(dev_env.client, settings):
        outcome, seen = await send_and_follow(dev_env.client, settings, seeded.email_id)
    assert outcome.status == "submitted"
    await assert_each_member_once(db, mailgun, seeded.email_id)
    provider_ids = {r["provider_id"] for r in await db.fetch(
        "SELECT provider_id FROM email_batches WHERE email_id = $1", seeded.email_id)}
    assert provider_ids == {m.id for m in mailgun.messages_for(seeded.email_id)}
    assert await db.fetchval("SELECT count(*) FROM email_batches WHERE email_id = $1 AND send_outcome = 'accepted'",
                             seeded.email_id) == 20
    if adversary == "late-events":  # looked up before its events were stored: the run waited, and said so
        assert any(p.confirming for p in seen)


@each_adversary
async def test_lost_answers_without_retries_then_send_again(adversary, db, mailgun, dev_env, newsletter_settings):
    """The first run gives up on the lost batches; `newsletter send` again looks them up, sends none twice."""
    settings = newsletter_settings(batch_size=50, provider_retries=0)
    seeded = await seed_email(db, members=500)
    play(mailgun, adversary, lost_response_rate=0.3, seed=7)
    async with running_worker(dev_env.client, settings):
        first, _ = await send_and_follow(dev_env.client, settings, seeded.email_id)
        assert first.status == "failed" and "partially sent" in first.message
        uncertain = await db.fetchval("SELECT count(*) FROM email_batches WHERE email_id = $1 AND status = 'failed' "
                                      "AND send_outcome = 'uncertain'", seeded.email_id)
        assert uncertain and f"{uncertain} of the failed batches may have reached Mailgun" in first.message
    play(mailgun, adversary)
    # The operator sends again, from a worker that retries as usual (the adversary still plays).
    usual = settings.model_copy(update={"provider_retries": 6, "provider_retry_seconds": 0.5})
    async with running_worker(dev_env.client, usual):
        again, _ = await send_and_follow(dev_env.client, usual, seeded.email_id)
    assert again.status == "submitted"
    await assert_each_member_once(db, mailgun, seeded.email_id)


async def test_progress_and_current_details_say_which_batch_is_being_confirmed(db, mailgun, dev_env,
                                                                               newsletter_settings):
    settings = newsletter_settings(batch_size=50, provider_retry_seconds=0.2, send_confirm_window_seconds=60)
    seeded = await seed_email(db, members=100)
    mailgun.set_faults(lost_response_rate=1.0, storage_delay_seconds=30)  # found only after 30 s
    async with running_worker(dev_env.client, settings):
        start = await start_newsletter(seeded.email_id, client=dev_env.client, settings=settings)
        handle = dev_env.client.get_workflow_handle(start.workflow_id)

        async def confirming() -> bool:
            return (await handle.query(SendNewsletterWorkflow.progress)).confirming == [1, 2]
        await wait_until(confirming, timeout=30)
        metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        assert "confirming batch 1, 2" in metadata.current_details
        mailgun.advance(30)  # the events appear: both are found, none sent again
        outcome = await follow_newsletter(start.workflow_id, client=dev_env.client)
    assert outcome.status == "submitted" and outcome.counts.batches_submitted == 2
    assert len(mailgun.messages_for(seeded.email_id)) == 2


async def test_without_a_confirm_window_late_events_make_second_copies(db, mailgun, dev_env, newsletter_settings):
    """Why the window exists: resent at once, a lost batch whose events are late goes out twice."""
    settings = newsletter_settings(batch_size=50, provider_retry_seconds=0.2, send_confirm_window_seconds=0)
    seeded = await seed_email(db, members=500)
    play(mailgun, "late-events", lost_response_rate=0.3, seed=7)
    async with running_worker(dev_env.client, settings):
        outcome, _ = await send_and_follow(dev_env.client, settings, seeded.email_id)
    assert outcome.status == "submitted"
    assert mailgun.stats()["duplicate_recipients"] > 0


async def test_a_refused_batch_fails_alone_and_a_rerun_sends_only_it(db, mailgun, ts_worker):
    client, settings = ts_worker
    settings_small = settings.model_copy(update={"batch_size": 10})
    seeded = await seed_email(db, members=30)
    [broken] = await refused_by_mailgun(db, settings_small, seeded.email_id)
    async with running_worker(client, settings_small, task_queue=settings.task_queue + "-small"):
        outcome = await client.execute_workflow(
            SendNewsletterWorkflow.run, {"email_id": seeded.email_id}, id=f"newsletter-{seeded.email_id}",
            task_queue=settings.task_queue + "-small")
    assert outcome.status == "failed" and "partially sent" in outcome.message
    assert outcome.counts.batches_failed == 1 and outcome.counts.batches_submitted == 2
    failed = await db.fetchrow("SELECT id, error_status_code, error_message FROM email_batches "
                               "WHERE email_id = $1 AND status = 'failed'", seeded.email_id)
    assert failed["error_status_code"] == 400 and "not a valid address" in failed["error_message"]
    email = await db.fetchrow("SELECT status, error FROM emails WHERE id = $1", seeded.email_id)
    assert email["status"] == "failed" and "partially sent" in email["error"]
    assert len(delivered(mailgun, seeded.email_id)) == 20

    # The operator fixes the address; running the send again sends the failed batch only.
    await db.execute("UPDATE email_recipients SET member_email = 'fixed1@example.com' WHERE member_email = $1", broken)
    before = len(mailgun.messages_for(seeded.email_id))
    async with running_worker(client, settings_small, task_queue=settings.task_queue + "-small"):
        rerun = await client.execute_workflow(
            SendNewsletterWorkflow.run, {"email_id": seeded.email_id}, id=f"newsletter-{seeded.email_id}",
            task_queue=settings.task_queue + "-small")
    assert rerun.status == "submitted"
    assert len(mailgun.messages_for(seeded.email_id)) == before + 1
    counts = delivered(mailgun, seeded.email_id)
    assert len(counts) == 30 and set(counts.values()) == {1}


async def test_history_stays_bounded_with_continue_as_new_and_replays(db, mailgun, dev_env, newsletter_settings):
    """The dev server suggests continuing as new after 200 events; 60 batches go past that."""
    settings = newsletter_settings(batch_size=10, send_concurrency=4)
    seeded = await seed_email(db, members=600)
    async with running_worker(dev_env.client, settings):
        start = await start_newsletter(seeded.email_id, client=dev_env.client, settings=settings)
        outcome = await follow_newsletter(start.workflow_id, client=dev_env.client)
    assert outcome.status == "submitted" and outcome.counts.batches_submitted == 60
    counts = delivered(mailgun, seeded.email_id)
    assert len(counts) == 600 and set(counts.values()) == {1}
    last = await dev_env.client.get_workflow_handle(start.workflow_id).describe()
    assert last.run_id != start.run_id  # it continued as new at least once
    first_history = await dev_env.client.get_workflow_handle(start.workflow_id, run_id=start.run_id).fetch_history()
    assert len(first_history.events) < 400
    replayer = Replayer(workflows=[SendNewsletterWorkflow], data_converter=data_converter())
    await replayer.replay_workflow(first_history)
    await replayer.replay_workflow(await dev_env.client.get_workflow_handle(start.workflow_id).fetch_history())


# A killed worker is noticed sooner than by default, so that its tests do not sit out Temporal's
# timeouts: its send activities are retried after a 5 s heartbeat timeout (15 s by default) and its
# runs' next tasks go to another worker after 3 s (10 s). Safe at load 20 on two cores: a live worker
# beats every 2 s and Temporal forwards a beat every 4 s (80% of the timeout); and either expiring on
# a live worker costs time (a batch looked up, a history replayed elsewhere), never correctness.
KILLED_WORKER_SETTINGS = {"PRESSROOM_SEND_HEARTBEAT_SECONDS": "5", "PRESSROOM_WORKER_STICKY_SECONDS": "3"}


def spawn_worker(settings, dev_env, **extra_env: str) -> subprocess.Popen:
    """A worker in its own process (so a test can SIGKILL it); its log goes to a file that `wait_until` shows."""
    env = {**os.environ, "DATABASE_URL": settings.database_url,
           "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
           "PRESSROOM_TASK_QUEUE": settings.task_queue, "MAILGUN_BASE_URL": settings.mailgun_base_url,
           "MAILGUN_API_KEY": settings.mailgun_api_key.get_secret_value(), "MAILGUN_DOMAIN": settings.mailgun_domain,
           "PRESSROOM_MEMBERS_LINK_SECRET": settings.members_link_secret.get_secret_value(),
           "PRESSROOM_BATCH_SIZE": str(settings.batch_size), "PRESSROOM_SEND_CONCURRENCY": "2",
           "PRESSROOM_PROVIDER_RETRY_SECONDS": "0.5",
           "PRESSROOM_SEND_CONFIRM_WINDOW_SECONDS": str(settings.send_confirm_window_seconds),
           "PRESSROOM_SEND_CONFIRM_POLL_SECONDS": str(settings.send_confirm_poll_seconds), **KILLED_WORKER_SETTINGS,
           **extra_env}
    with tempfile.NamedTemporaryFile(prefix="pressroom-worker-", suffix=".log", delete=False) as log:
        worker = subprocess.Popen([sys.executable, "-m", "worker"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                  stderr=log)
    worker.log_path = log.name  # type: ignore[attr-defined]
    return worker


def worker_log(worker: subprocess.Popen | None, lines: int = 20) -> str:
    """The last lines a spawned worker wrote, for a failure message."""
    path = getattr(worker, "log_path", None)
    if path is None:
        return ""
    tail = Path(path).read_text(errors="replace").splitlines()[-lines:]
    return "\nworker log:\n" + "\n".join(tail)


async def wait_until(check, timeout: float = 90, worker: subprocess.Popen | None = None) -> None:
    """Poll `check` until it is true; fail at once if the given worker process died, and show its log."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert worker is None or worker.poll() is None, f"the worker exited ({worker.returncode}){worker_log(worker)}"
        assert loop.time() < deadline, f"timed out waiting{worker_log(worker)}"
        await asyncio.sleep(0.05)


@pytest.mark.crash
async def test_a_worker_killed_while_creating_batches_and_while_sending(db, mailgun, dev_env, newsletter_settings):
    """SIGKILL a worker process twice; the next worker finishes with nobody missing and nobody twice."""
    settings = newsletter_settings(batch_size=500)
    seeded = await seed_email(db, members=20_000)
    mailgun.set_faults(latency_ms=300)
    client: Client = dev_env.client

    worker = spawn_worker(settings, dev_env)
    try:
        start = await start_newsletter(seeded.email_id, client=client, settings=settings)

        async def creating() -> bool:  # a chunk's statement is running, or one has just committed
            return bool(await db.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%WITH chosen%' AND state = 'active' "
                "AND pid <> pg_backend_pid()")) or bool(await db.fetchval(
                "SELECT count(*) FROM email_batches WHERE email_id = $1", seeded.email_id))
        await wait_until(creating, worker=worker)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        # Killed mid-statement or just after: each chunk commits whole or not at all.
        written = await db.fetchval("SELECT count(*) FROM email_recipients WHERE email_id = $1", seeded.email_id)
        assert written % (CHUNK_BATCHES * 500) == 0 and written <= 20_000, written

        worker = spawn_worker(settings, dev_env)

        async def sending() -> bool:
            return bool(await db.fetchval("SELECT count(*) FROM email_batches WHERE email_id = $1 "
                                          "AND status = 'submitted'", seeded.email_id))
        await wait_until(sending, worker=worker)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        worker = spawn_worker(settings, dev_env)
        outcome = await follow_newsletter(start.workflow_id, client=client)
    finally:
        worker.terminate()  # whatever happened: no worker of this test outlives it
        worker.wait()
    assert outcome.status == "submitted" and outcome.counts.batches_submitted == 40
    # The workers' heartbeat setting reached the run through its plan: each kill was noticed in 5 s.
    history = await client.get_workflow_handle(start.workflow_id, run_id=start.run_id).fetch_history()
    assert {event.activity_task_scheduled_event_attributes.heartbeat_timeout.ToTimedelta().total_seconds()
            for event in history.events if event.HasField("activity_task_scheduled_event_attributes")
            and event.activity_task_scheduled_event_attributes.activity_type.name in ("create_batches", "send_batch")
            } == {float(KILLED_WORKER_SETTINGS["PRESSROOM_SEND_HEARTBEAT_SECONDS"])}
    counts = delivered(mailgun, seeded.email_id)
    assert len(counts) == 20_000 and set(counts.values()) == {1}
    assert await db.fetchval("SELECT count(*) FROM (SELECT member_id FROM email_recipients WHERE email_id = $1 "
                             "GROUP BY member_id HAVING count(*) > 1) twice", seeded.email_id) == 0


@pytest.mark.parametrize("adversary", ["faithful", "own-ids", "late-events"])
@pytest.mark.crash
async def test_a_worker_killed_mid_send_under_each_adversary(adversary, db, mailgun, dev_env, newsletter_settings):
    """SIGKILL while requests are in flight: what Mailgun stored is found, the rest is sent, nobody twice."""
    settings = newsletter_settings(batch_size=100)
    seeded = await seed_email(db, members=2000)
    play(mailgun, adversary, latency_ms=300)
    worker = spawn_worker(settings, dev_env)
    try:
        start = await start_newsletter(seeded.email_id, client=dev_env.client, settings=settings)

        async def mid_send() -> bool:  # a batch was sent, and another's request is out (marked before it goes)
            return await db.fetchval(
                "SELECT bool_or(status = 'submitted') "
                "AND bool_or(status = 'submitting' AND send_outcome = 'uncertain') "
                "FROM email_batches WHERE email_id = $1", seeded.email_id) or False
        await wait_until(mid_send, worker=worker)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        worker = spawn_worker(settings, dev_env)
        outcome = await follow_newsletter(start.workflow_id, client=dev_env.client)
    finally:
        worker.terminate()
        worker.wait()
    assert outcome.status == "submitted" and outcome.counts.batches_submitted == 20
    await assert_each_member_once(db, mailgun, seeded.email_id)


@pytest.mark.crash
async def test_a_worker_killed_with_a_group_of_batches_in_hand_resends_none_without_looking_them_up(
        db, mailgun, dev_env, newsletter_settings):
    """SIGKILL while one send_batches activity holds several batches whose requests are out: each is
    looked up in the provider's events before anything is sent again, and every member gets one copy."""
    settings = newsletter_settings(batch_size=100)
    seeded = await seed_email(db, members=1200)  # 12 batches; 8 senders send them in groups of 4
    mailgun.set_faults(latency_ms=3000)  # the group's requests stay out long enough to be killed under
    worker = spawn_worker(settings, dev_env, PRESSROOM_SEND_CONCURRENCY="8")
    try:
        start = await start_newsletter(seeded.email_id, client=dev_env.client, settings=settings)
        handle = dev_env.client.get_workflow_handle(start.workflow_id)

        async def in_flight() -> list[str]:  # claimed and marked uncertain: their requests are out
            return [row["id"] for row in await db.fetch(
                "SELECT id FROM email_batches WHERE email_id = $1 AND status = 'submitting' "
                "AND send_outcome = 'uncertain' ORDER BY id", seeded.email_id)]

        async def a_group_is_out() -> bool:
            pending = (await handle.describe()).raw_description.pending_activities
            groups = [a for a in pending if a.activity_type.name == "send_batches" and a.attempt == 1]
            return bool(groups) and len(await in_flight()) >= 2
        await wait_until(a_group_is_out, worker=worker)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        held = await in_flight()
        assert len(held) >= 2, held
        lookups_before = mailgun.request_counts["events"]
        worker = spawn_worker(settings, dev_env, PRESSROOM_SEND_CONCURRENCY="8")
        outcome = await follow_newsletter(start.workflow_id, client=dev_env.client)
    finally:
        worker.terminate()
        worker.wait()
    assert outcome.status == "submitted" and outcome.counts.batches_submitted == 12
    await assert_each_member_once(db, mailgun, seeded.email_id)
    # Each batch held at the kill was looked up (its first send stays uncertain until it is) and
    # went to the provider once: found there, or sent again only after the look-up found nothing.
    assert mailgun.request_counts["events"] - lookups_before >= len(held)
    for batch_id in held:
        sends = [m for m in mailgun.messages_for(seeded.email_id) if batch_id in m.variables.values()]
        assert len(sends) == 1, (batch_id, len(sends))
    attempts = await db.fetch("SELECT id, status, send_attempts FROM email_batches WHERE id = ANY($1::text[])", held)
    assert all(row["status"] == "submitted" for row in attempts)

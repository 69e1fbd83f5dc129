"""`--json` on every status and show command: one JSON document with the shape docs/operating.md documents."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from operations.members import add_member
from operations.posts import schedule_post
from tests.newsletter.conftest import seed_email
from tests.newsletter.test_failures import wait_until
from tests.operations.test_waiting import cli, cli_env
from worker import running_worker

NEWSLETTER_STATUS = {"email_id", "status", "error", "submitted_at", "workflow_id", "run", "progress", "batches",
                     "waiting_for", "recipients", "recipients_expected", "skipped_recipients",
                     "cancelled_by", "cancelled_at", "temporal"}


async def json_of(*args: str, env) -> dict:
    code, out, err = await cli(*args, "--json", env=env)
    assert code == 0, err
    return json.loads(out)


async def test_newsletter_status_and_follow(dev_env, settings, db, mailgun):
    env = cli_env(settings, dev_env)
    seeded = await seed_email(db, members=5)
    before = await json_of("newsletter", "status", seeded.email_id, env=env)
    assert set(before) == NEWSLETTER_STATUS
    assert before["status"] == "pending" and before["run"] is None and before["progress"] is None
    assert before["batches"] == {"total": 0, "submitted": 0, "failed": 0}

    async with running_worker(dev_env.client, settings):
        code, _, err = await cli("newsletter", "send", seeded.email_id, env=env)
        assert code == 0, err
        outcome = await json_of("newsletter", "follow", seeded.email_id, env=env)
    assert set(outcome) == {"email_id", "status", "message", "counts"}
    assert outcome["status"] == "submitted" and outcome["counts"]["recipients_submitted"] == 5

    after = await json_of("newsletter", "status", seeded.email_id, env=env)
    assert set(after) == NEWSLETTER_STATUS
    assert after["status"] == "submitted" and after["recipients"] == 5
    assert after["batches"] == {"total": 1, "submitted": 1, "failed": 0}
    assert set(after["run"]) == {"run_id", "status", "task_queue", "worker_polling", "worker_answering",
                                "query_seconds"}
    assert after["run"]["status"] == "completed" and after["run"]["worker_polling"] is None
    datetime.fromisoformat(after["submitted_at"])


async def test_outbox_status_and_show(dev_env, settings, db):
    env = cli_env(settings, dev_env)
    await db.execute("INSERT INTO automated_emails (name, slug, subject, html) VALUES "
                     "('Welcome', 'member-welcome-email-free', 'Welcome!', '<p>Hi</p>')")
    added = await add_member("json.reader@example.com", welcome=True, settings=settings)
    status = await json_of("outbox", "status", env=env)
    assert status == {"counts": {"pending": 1}, "oldest_pending_seconds": status["oldest_pending_seconds"],
                      "waiting": [], "skipped": [], "by_event": {}, "by_webhook": {}}
    assert isinstance(status["oldest_pending_seconds"], float)
    outbox_id = await db.fetchval("SELECT id FROM outbox WHERE idempotency_key = $1", added.welcome_key)
    entry = await json_of("outbox", "show", outbox_id, env=env)
    assert set(entry) == {"outbox_id", "event_type", "idempotency_key", "status", "attempts", "next_run_at",
                          "last_error_code", "last_error_msg", "created_at", "dispatched_at", "processed_at", "ledger",
                          "member_id"}
    assert (entry["outbox_id"], entry["event_type"], entry["status"]) == (outbox_id, "MemberCreatedEvent", "pending")
    assert "json.reader@example.com" not in json.dumps(entry)


async def test_posts_status(dev_env, settings, db):
    env = cli_env(settings, dev_env)
    seeded = await seed_email(db, members=1, post_status="draft")
    at = datetime.now(UTC) + timedelta(days=2)
    await schedule_post(seeded.post_id, at.isoformat(), client=dev_env.client, settings=settings)
    try:
        overview = await json_of("posts", "status", env=env)
        assert overview == {"counts": {"scheduled": 1}, "overdue": 0, "newsletter_not_going": [],
                            "next": [{"post_id": seeded.post_id, "publish_at": overview["next"][0]["publish_at"]}]}
        assert datetime.fromisoformat(overview["next"][0]["publish_at"]) == at
        one = await json_of("posts", "status", seeded.post_id, env=env)
        assert set(one) == {"post_id", "status", "publish_at", "published_at", "workflow_id", "run", "email"}
        assert one["email"] == {"email_id": seeded.email_id, "status": "pending", "will_not_go_out": None}
        assert one["status"] == "scheduled" and one["published_at"] is None
        assert set(one["run"]) == {"run_id", "status", "task_queue", "worker_polling", "timer_at"}
        # No worker has run it yet: no timer is set, and the status says nobody polls.
        assert one["run"]["status"] == "running" and one["run"]["timer_at"] is None
        assert one["run"]["worker_polling"] is False
        async with running_worker(dev_env.client, settings):
            async def timer_set() -> bool:
                return (await json_of("posts", "status", seeded.post_id, env=env))["run"]["timer_at"] is not None
            await wait_until(timer_set, 60)
            one = await json_of("posts", "status", seeded.post_id, env=env)
        assert datetime.fromisoformat(one["run"]["timer_at"]) == at and one["run"]["worker_polling"] is True
    finally:
        await dev_env.client.get_workflow_handle(f"post-publish-{seeded.post_id}").terminate()


async def test_show_and_status_of_unknown_ids_are_one_line(dev_env, settings, db):
    env = cli_env(settings, dev_env)
    for args, words in ((("newsletter", "status", "nope"), "email nope does not exist"),
                        (("newsletter", "follow", "nope"), "newsletter-nope was never started"),
                        (("outbox", "show", "nope"), "outbox entry nope does not exist"),
                        (("posts", "status", "nope"), "post nope does not exist")):
        code, out, err = await cli(*args, "--json", env=env)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 1 and len(lines) == 1 and words in lines[0], (args, err)
        assert out == ""

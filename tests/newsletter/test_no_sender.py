"""Outside the development stack there is no default sender: an email whose newsletter has no sender,
with PRESSROOM_FROM_ADDRESS unset, is refused by `newsletter send` and by the send's lock for an
email started any other way (a scheduled post), in one line naming both, before any batch is written."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from temporalio.client import WorkflowFailureError

from pressroom.settings import DEV_FROM_ADDRESS, load_settings
from tests.foundation.test_cli import assert_one_line_error, pressroom
from tests.operations.test_waiting import cli_env
from worker import running_worker
from workflows.newsletter import SendNewsletterWorkflow
from workflows.newsletter_models import SendNewsletterInput, newsletter_workflow_id

from .conftest import seed_email


def without_sender(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k != "PRESSROOM_FROM_ADDRESS"}


def test_no_default_sender_outside_the_development_stack(monkeypatch, tmp_path):
    monkeypatch.delenv("PRESSROOM_FROM_ADDRESS")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("PRESSROOM_HOME", str(tmp_path))  # no development stack here
    assert load_settings().from_address == ""
    # The development stack's database: its site's sender, as `dev env` prints it.
    (tmp_path / "stack.json").write_text(json.dumps({"database_url": "postgresql://dev@127.0.0.1:1/dev"}))
    assert load_settings().from_address == DEV_FROM_ADDRESS
    # Another database named: a site of its own, with no default.
    monkeypatch.setenv("DATABASE_URL", "postgresql://site@127.0.0.1:1/site")
    assert load_settings().from_address == ""


async def test_newsletter_send_refuses_an_email_without_a_sender_and_starts_nothing(db, mailgun, settings, dev_env,
                                                                                   monkeypatch):
    monkeypatch.delenv("PRESSROOM_FROM_ADDRESS")
    seeded = await seed_email(db, members=3)
    slug = await db.fetchval("UPDATE newsletters SET sender_email = NULL WHERE id = $1 RETURNING slug",
                             seeded.newsletter_id)
    env = without_sender(cli_env(settings, dev_env))
    done = await asyncio.to_thread(pressroom, "newsletter", "send", seeded.email_id, env=env)
    assert_one_line_error(done, f"email {seeded.email_id} has no sender: newsletter {slug} has no sender and "
                                "PRESSROOM_FROM_ADDRESS is not set; set `pressroom newsletters edit "
                                f"{slug} --sender-email ADDRESS` or PRESSROOM_FROM_ADDRESS")
    assert await db.fetchval("SELECT status FROM emails WHERE id = $1", seeded.email_id) == "pending"
    # A test copy needs a sender too; a preview (nothing sent) does not.
    copy = await asyncio.to_thread(pressroom, "newsletter", "test", seeded.email_id, "--to", "editor@example.com",
                                   env=env)
    assert_one_line_error(copy, f"newsletter {slug} has no sender and PRESSROOM_FROM_ADDRESS is not set")
    preview = await asyncio.to_thread(pressroom, "newsletter", "preview", seeded.email_id, env=env)
    assert preview.returncode == 0, preview.stderr
    # With the site-wide sender set, the same command starts the send.
    done = await asyncio.to_thread(pressroom, "newsletter", "send", seeded.email_id,
                                   env={**env, "PRESSROOM_FROM_ADDRESS": DEV_FROM_ADDRESS})
    assert done.returncode == 0, done.stderr


async def test_a_send_started_otherwise_fails_in_its_lock_naming_the_setting(db, mailgun, time_skipping_env,
                                                                              newsletter_settings):
    settings = newsletter_settings(from_address="")
    client = time_skipping_env.client
    seeded = await seed_email(db, members=3)
    slug = await db.fetchval("UPDATE newsletters SET sender_email = NULL WHERE id = $1 RETURNING slug",
                             seeded.newsletter_id)
    async with running_worker(client, settings):
        with pytest.raises(WorkflowFailureError) as failure:
            await client.execute_workflow(SendNewsletterWorkflow.run, SendNewsletterInput(email_id=seeded.email_id),
                                          id=newsletter_workflow_id(seeded.email_id), task_queue=settings.task_queue)
    words = f"email {seeded.email_id} has no sender: newsletter {slug} has no sender and PRESSROOM_FROM_ADDRESS"
    assert words in failure.value.cause.message
    email = await db.fetchrow("SELECT status, error FROM emails WHERE id = $1", seeded.email_id)
    assert email["status"] == "failed" and words in email["error"]
    assert await db.fetchval("SELECT count(*) FROM email_batches") == 0
    assert mailgun.messages_for(seeded.email_id) == []
    assert os.environ.get("PRESSROOM_FROM_ADDRESS")  # the other tests' sender is left as it was

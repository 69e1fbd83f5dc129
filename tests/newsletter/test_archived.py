"""An archived newsletter's email is never sent, in the reference platform's words: refused by
`newsletter send`, and by the send's lock for an email started any other way (a scheduled post)."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.service import RPCError

from operations.newsletter import start_newsletter
from pressroom.errors import BadInput
from workflows.newsletter import SendNewsletterWorkflow
from workflows.newsletter_models import SendNewsletterInput, newsletter_workflow_id

from .conftest import seed_email

WORDS = "Cannot send email to archived newsletters"


async def test_newsletter_send_refuses_an_archived_newsletters_email_and_starts_nothing(db, mailgun, ts_worker):
    client, settings = ts_worker
    seeded = await seed_email(db, members=3)
    await db.execute("UPDATE newsletters SET status = 'archived' WHERE id = $1", seeded.newsletter_id)
    with pytest.raises(BadInput, match=f"^{WORDS} \\(email {seeded.email_id}: newsletter {seeded.newsletter_id} "
                                       "is archived\\)$"):
        await start_newsletter(seeded.email_id, client=client, settings=settings)
    with pytest.raises(RPCError, match="not found"):
        await client.get_workflow_handle(newsletter_workflow_id(seeded.email_id)).describe()
    assert await db.fetchval("SELECT status FROM emails WHERE id = $1", seeded.email_id) == "pending"


async def test_a_send_started_otherwise_fails_in_its_lock_with_the_reason_and_sends_nothing(db, mailgun, ts_worker):
    client, settings = ts_worker
    seeded = await seed_email(db, members=3)
    await db.execute("UPDATE newsletters SET status = 'archived' WHERE id = $1", seeded.newsletter_id)
    with pytest.raises(WorkflowFailureError) as failure:
        await client.execute_workflow(SendNewsletterWorkflow.run, SendNewsletterInput(email_id=seeded.email_id),
                                      id=newsletter_workflow_id(seeded.email_id), task_queue=settings.task_queue)
    assert failure.value.cause.message.startswith(WORDS)
    email = await db.fetchrow("SELECT status, error, locked_by FROM emails WHERE id = $1", seeded.email_id)
    assert (email["status"], email["locked_by"]) == ("failed", None)
    assert email["error"].startswith(WORDS)
    assert await db.fetchval("SELECT count(*) FROM email_batches") == 0
    assert mailgun.messages_for(seeded.email_id) == []

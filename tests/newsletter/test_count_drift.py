"""Recipient count drift: when the recipients written differ from the site's `email_count` by more
than 1%, the count is corrected, one log line says so (ids and numbers, no address), and `newsletter
status` shows the site's count beside the real one."""

from __future__ import annotations

import logging

import pytest

from commands.newsletter import drift_note
from operations.newsletter import newsletter_status
from workflows.newsletter import SendNewsletterWorkflow
from workflows.newsletter_models import SendNewsletterInput, newsletter_workflow_id

from .conftest import seed_email


@pytest.mark.parametrize("members, site_count, drift", [(50, 60, True), (50, 50, False), (50, 0, False),
                                                        (99, 100, True)])  # exactly 1% drifts too
async def test_a_recipient_count_drift_over_one_percent_is_logged_and_shown(db, mailgun, ts_worker, caplog,
                                                                            members, site_count, drift):
    client, settings = ts_worker
    seeded = await seed_email(db, members=members)
    await db.execute("UPDATE emails SET email_count = $2 WHERE id = $1", seeded.email_id, site_count)
    with caplog.at_level(logging.WARNING):
        outcome = await client.execute_workflow(
            SendNewsletterWorkflow.run, SendNewsletterInput(email_id=seeded.email_id),
            id=newsletter_workflow_id(seeded.email_id), task_queue=settings.task_queue)
    assert outcome.status == "submitted"
    assert await db.fetchval("SELECT email_count FROM emails WHERE id = $1", seeded.email_id) == members
    lines = [r.getMessage() for r in caplog.records
             if f"email {seeded.email_id}: {members} recipients written" in r.getMessage()]
    status = await newsletter_status(seeded.email_id, client=client, settings=settings)
    if drift and site_count == 100:
        assert len(lines) == 1 and "not the 100 the site counted (-1.0%); email_count corrected" in lines[0]
        assert status.recipients_expected == 100
    elif drift:
        assert len(lines) == 1 and "not the 60 the site counted (-16.7%); email_count corrected" in lines[0]
        assert "@" not in lines[0]  # ids and numbers only
        assert status.recipients == 50 and status.recipients_expected == 60
        assert drift_note(status) == " (the site counted 60: -16.7%, email_count corrected)"
    else:
        assert lines == [] and status.recipients_expected is None and drift_note(status) == ""

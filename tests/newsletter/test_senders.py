"""A send from an identity the provider has not verified is refused by name before its first
batch, and the email failed with the reason: Mailgun's domain API and SES's GetEmailIdentity, over
HTTP against the simulator and the stand-in."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowFailureError

from operations.deliverability import check_senders
from tests.ses_stack import running_ses_stack

from .conftest import seed_email
from .test_send import delivered, run_send


async def test_a_send_from_a_domain_mailgun_has_not_verified_is_refused_by_name_before_any_batch(
        db, mailgun, ts_worker):
    client, settings = ts_worker
    seeded = await seed_email(db, members=30)
    mailgun.unverified_domains.add(mailgun.domain)
    with pytest.raises(WorkflowFailureError) as refused:
        await run_send(client, settings, seeded.email_id)
    reason = str(refused.value.cause)
    assert f"Mailgun has not verified {mailgun.domain} for sending" in reason and "unverified" in reason
    row = await db.fetchrow("SELECT status, error FROM emails WHERE id = $1", seeded.email_id)
    assert row["status"] == "failed" and f"has not verified {mailgun.domain}" in row["error"]
    assert not delivered(mailgun, seeded.email_id) and mailgun.request_counts["messages"] == 0


async def test_ses_refuses_a_sender_whose_identity_is_not_verified_and_pressroom_says_so_first(
        db, postgres_url, mailgun, monkeypatch, tmp_path, time_skipping_env):
    from worker import running_worker

    async with running_ses_stack(postgres_url, mailgun, monkeypatch, tmp_path) as ses:
        seeded = await seed_email(db, members=10)
        await db.execute("UPDATE newsletters SET sender_email = 'news@unverified.example' WHERE id = $1",
                         seeded.newsletter_id)
        async with running_worker(time_skipping_env.client, ses.settings):
            with pytest.raises(WorkflowFailureError) as refused:
                await run_send(time_skipping_env.client, ses.settings, seeded.email_id)
        assert "Amazon SES has not verified unverified.example for sending" in str(refused.value.cause)
        assert ses.simulator.requests["send"] == 0 and ses.simulator.delivered == []
        # The stand-in refuses it too, as SES does, when asked directly.
        assert not ses.simulator.sender_verified("news@unverified.example")
        result = await check_senders(None, ses.settings)
        assert not result.ok and "unverified.example not verified by Amazon SES" in result.detail

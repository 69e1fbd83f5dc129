"""The provider's answer is kept on the batch, as the reference keeps it (error_status_code,
error_message, no address), and a send that no batch got through says the batches' reason."""

from __future__ import annotations

import pytest
from pydantic import SecretStr
from temporalio.client import WorkflowFailureError

from operations.newsletter import newsletter_status
from operations.reports import newsletter_report
from worker import running_worker

from .conftest import seed_email
from .test_send import run_send


async def failed_batches(db, email_id: str) -> list[tuple[int | None, str]]:
    return [(r["error_status_code"], r["error_message"]) for r in await db.fetch(
        "SELECT error_status_code, error_message FROM email_batches WHERE email_id = $1 AND status = 'failed'",
        email_id)]


async def outcome_of(client, settings, email_id: str):
    try:
        return await run_send(client, settings, email_id)
    except WorkflowFailureError as failure:  # a send that fails every batch ends failed, with the reason
        pytest.fail(f"the send itself failed: {failure.cause}")


async def test_500_until_the_tries_run_out_keeps_the_providers_status_and_message(
        db, mailgun, time_skipping_env, newsletter_settings):
    settings = newsletter_settings(provider_retries=1, provider_retry_seconds=0.1)
    seeded = await seed_email(db, members=3)
    mailgun.set_faults(error_rate=1.0)
    async with running_worker(time_skipping_env.client, settings):
        outcome = await outcome_of(time_skipping_env.client, settings, seeded.email_id)
    assert outcome.status == "failed"
    [(code, message)] = await failed_batches(db, seeded.email_id)
    assert (code, message) == (500, "Mailgun failed the batch of 3 recipients (500): Internal Server Error")
    why = await db.fetchval("SELECT error_data->>'message' FROM email_batches WHERE email_id = $1", seeded.email_id)
    assert "without a certain answer from the provider" in why  # why the tries stopped, beside the answer
    assert outcome.message.startswith("The email failed to send: no batch was accepted by Mailgun (Mailgun failed "
                                      "the batch of 3 recipients (500): Internal Server Error).")


async def test_every_batch_refused_401_the_status_and_the_report_say_why(
        db, mailgun, time_skipping_env, newsletter_settings, dev_env):
    settings = newsletter_settings(temporal_address=dev_env.client.service_client.config.target_host)
    settings = settings.model_copy(update={"mailgun_api_key": SecretStr("key-not-the-accounts")})
    seeded = await seed_email(db, members=3)
    async with running_worker(time_skipping_env.client, settings):
        outcome = await outcome_of(time_skipping_env.client, settings, seeded.email_id)
    assert outcome.status == "failed"
    answer = "Mailgun answered 401: the API key was refused (check MAILGUN_API_KEY)"
    assert await failed_batches(db, seeded.email_id) == [(401, answer)]
    reason = f"no batch was accepted by Mailgun ({answer})"
    assert reason in ((await newsletter_status(seeded.email_id, settings=settings)).error or "")
    assert reason in ((await newsletter_report(seeded.email_id, settings=settings)).error or "")
    assert "@" not in outcome.message

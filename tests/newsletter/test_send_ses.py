"""A newsletter sent through SES end to end: the real workflow and worker on the time-skipping
server, SES's client against the stand-in, its SNS notifications through the webhook receiver into
PostgreSQL. SES takes 50 destinations a call, so batches ask the provider and are 50 each; a batch
whose answer was lost is confirmed from the Send events received, never sent twice."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.ses_stack import running_ses_stack, subscribed
from tests.webhooks.conftest import eventually
from worker import running_worker

from .conftest import seed_email
from .test_send import run_send


@pytest.fixture
async def ses(postgres_url, mailgun, db, monkeypatch, tmp_path):
    async with running_ses_stack(postgres_url, mailgun, monkeypatch, tmp_path) as stack:
        stack.simulator.auto_push = True
        await subscribed(stack)
        yield stack


async def test_each_member_gets_one_message_with_their_own_values_and_headers_even_when_answers_are_lost(
        db, ses, time_skipping_env):
    seeded = await seed_email(db, members=120)
    ses.simulator.set_faults(lost_answers=2, throttled=1, server_errors=1)
    async with running_worker(time_skipping_env.client, ses.settings):
        outcome = await run_send(time_skipping_env.client, ses.settings, seeded.email_id)

    assert outcome.status == "submitted" and outcome.counts.batches_total == 3  # 120 members, 50 a call
    counts = Counter(copy.address for copy in ses.simulator.delivered)
    members = await db.fetch("SELECT m.email, m.uuid, m.name FROM members m JOIN members_newsletters mn "
                             "ON mn.member_id = m.id WHERE mn.newsletter_id = $1", seeded.newsletter_id)
    assert set(counts) == {m["email"] for m in members} and set(counts.values()) == {1}
    copies = {copy.address: copy for copy in ses.simulator.delivered}
    for member in members:
        copy = copies[member["email"]]
        assert member["name"] in copy.html and str(member["uuid"]) in copy.headers["List-Unsubscribe"]
        assert copy.headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
        assert copy.tags["email-id"] and "bulk-email" in copy.tags
    faults = ses.simulator.faults
    assert (faults.lost_answers, faults.throttled, faults.server_errors) == (0, 0, 0)
    # 3 calls accepted (2 of them unanswered, confirmed from their Send events), 1 throttled, 1 failed.
    assert ses.simulator.requests["send"] == 5
    async def all_kept() -> bool:  # the pushes of the batches answered at once may still be on their way
        return await db.fetchval("SELECT count(*) FROM provider_acceptances WHERE marks ->> 'email-id' = $1",
                                 seeded.email_id) == 120
    assert await eventually(all_kept, seconds=30)

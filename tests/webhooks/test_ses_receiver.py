"""POST /webhooks/ses against the SES stand-in over real HTTP and PostgreSQL: the subscription
confirmed when SNS asks, Send events kept to confirm an uncertain send, the other events into the
inbox, SNS's retries and duplicates stored once, forged or foreign messages refused."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from devstack.servers import free_port
from pressroom.providers.port import UNCERTAIN, Message, ProviderUnavailable, placeholder
from pressroom.providers.ses import SesClient
from pressroom.providers.ses.push import SesPush
from tests.command_line import ROOT
from tests.ses_stack import SesStack, running_ses_stack, subscribed
from tests.webhooks.conftest import post


@pytest.fixture
async def ses(postgres_url, mailgun, db, monkeypatch, tmp_path) -> AsyncIterator[SesStack]:
    async with running_ses_stack(postgres_url, mailgun, monkeypatch, tmp_path) as stack:
        yield stack


def newsletter(client: SesClient):
    return client.prepare(Message(
        from_address="news@ses.simulator.test", subject=f"Hello {placeholder('name')}", tags=["bulk-email"],
        html=f"<p>Hi {placeholder('name')}</p>", text=f"Hi {placeholder('name')}",
        headers={"List-Unsubscribe": f"<{placeholder('unsubscribe_url')}>", "List-Unsubscribe-Post":
                 "List-Unsubscribe=One-Click"}))


def readers(count: int) -> dict[str, dict[str, str]]:
    return {f"reader{n}@example.com": {"name": f"Reader {n}", "unsubscribe_url": f"https://site.test/u/{n}"}
            for n in range(count)}


async def test_the_subscription_is_confirmed_and_events_are_kept_or_stored_once(ses: SesStack):
    await subscribed(ses)
    sent = await ses.client.send(newsletter(ses.client), readers(3),
                                 mark={"email-id": "e1", "pressroom-batch": "b1.0001"})
    assert len(sent.accepted) == 3 and len(set(sent.accepted.values())) == 3  # one SES message per reader
    copy = ses.simulator.delivered[0]
    assert copy.headers == {"List-Unsubscribe": "<https://site.test/u/0>",
                            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"}
    ses.simulator.set_faults(duplicate_pushes=True)
    answers = await ses.simulator.push_to_subscribers()
    assert answers == {"200": 12}  # 3 Send + 3 Delivery, each twice
    kept = await ses.pool.fetch("SELECT recipient, marks, provider_message_id FROM provider_acceptances ORDER BY 1")
    assert [(row["recipient"], json.loads(row["marks"])["pressroom-batch"]) for row in kept] == \
        [(f"reader{n}@example.com", "b1.0001") for n in range(3)]
    assert await ses.pool.fetchval("SELECT count(*) FROM webhook_inbox WHERE provider = 'ses'") == 3
    now = datetime.now(UTC)
    assert await ses.client.find_accepted(recipient="Reader1@example.com", mark={"pressroom-batch": "b1.0001"},
                                          begin=now - timedelta(minutes=5), end=now + timedelta(minutes=5)) \
        == sent.accepted["reader1@example.com"]


async def test_a_lost_answer_is_confirmed_from_the_received_send_events(ses: SesStack):
    await subscribed(ses)
    begin = datetime.now(UTC) - timedelta(seconds=5)
    ses.simulator.set_faults(lost_answers=1)
    with pytest.raises(ProviderUnavailable) as caught:
        await ses.client.send(newsletter(ses.client), readers(2), mark={"pressroom-batch": "b9"})
    assert caught.value.outcome == UNCERTAIN
    end = datetime.now(UTC) + timedelta(seconds=5)
    assert await ses.client.find_accepted(recipient="reader0@example.com", mark={"pressroom-batch": "b9"},
                                          begin=begin, end=end) is None  # not received yet: look again later
    ses.simulator.set_faults(reorder_pushes=True)
    await ses.simulator.push_to_subscribers()
    found = await ses.client.find_accepted(recipient="reader0@example.com", mark={"pressroom-batch": "b9"},
                                           begin=begin, end=end)
    assert found == ses.simulator.delivered[0].message_id
    assert await ses.client.find_accepted(recipient="reader0@example.com", mark={"pressroom-batch": "b8"},
                                          begin=begin, end=end) is None


async def test_the_stand_in_tells_how_many_of_an_emails_send_events_are_not_pushed_yet(ses: SesStack):
    """What bench/faults_ses.py waits on before it reads a row's lateness from the kept acceptances."""
    await subscribed(ses)
    ses.simulator.set_faults(events_delay=3600)  # not visible, so not pushed
    await ses.client.send(newsletter(ses.client), readers(3), mark={"email-id": "e1", "pressroom-batch": "b1"})
    ses.simulator.set_faults(events_delay=0)
    await ses.client.send(newsletter(ses.client), readers(2), mark={"email-id": "e2", "pressroom-batch": "b2"})
    assert (ses.simulator.unpushed("e1"), ses.simulator.unpushed("e2"), ses.simulator.unpushed("e3")) == (3, 2, 0)
    assert ses.simulator.unpushed("e2", kind="Delivery") == 2
    await ses.simulator.push_to_subscribers()
    assert (ses.simulator.unpushed("e1"), ses.simulator.unpushed("e2")) == (3, 0)
    lateness = await ses.pool.fetch("SELECT extract(epoch FROM received_at - accepted_at)::float8 AS late "
                                    "FROM provider_acceptances WHERE marks @> '{\"email-id\": \"e2\"}'")
    assert len(lateness) == 2 and all(0 <= row["late"] < 60 for row in lateness)


async def test_forged_foreign_or_unsigned_messages_are_refused_and_counted(ses: SesStack):
    await subscribed(ses)
    await ses.client.send(newsletter(ses.client), readers(1), mark={"pressroom-batch": "b2"})
    genuine = ses.simulator.notifications()[1]
    forged = {**genuine, "Message": genuine["Message"].replace("reader0", "victim")}
    foreign = {**genuine, "TopicArn": genuine["TopicArn"] + "-other"}
    version_one = {**genuine, "SignatureVersion": "1"}
    elsewhere = {**genuine, "SigningCertURL": "https://evil.example.com/cert.pem"}
    for body in (forged, foreign, version_one, elsewhere):
        assert await post(ses.url, body) == 400
    assert await post(ses.url, None, raw=b"{not json") == 400
    assert await ses.pool.fetchval("SELECT count(*) FROM webhook_inbox") == 0
    assert await post(ses.url, genuine) == 200
    await ses.receiver.flush_refusals()
    refusals = dict(await ses.pool.fetch("SELECT reason, count FROM webhook_refusals WHERE provider = 'ses'"))
    assert refusals == {"signature does not match": 1, "topic not ours": 1,
                        "SignatureVersion is not 2 (set the topic's SignatureVersion attribute to 2)": 1,
                        "certificate URL not SNS's": 1, "body is not JSON": 1}


def test_production_trusts_only_sns_hosts_of_the_region():
    push = SesPush(topic_arn="arn:aws:sns:eu-west-1:123456789012:t", region="eu-west-1")
    base = {"Type": "Notification", "MessageId": "m-1", "TopicArn": "arn:aws:sns:eu-west-1:123456789012:t",
            "Message": "{}", "Timestamp": "2026-01-01T00:00:00.000Z", "SignatureVersion": "2", "Signature": "x"}
    good = "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-abc.pem"
    assert push.checked_fields({**base, "SigningCertURL": good})
    for url in ("http://sns.eu-west-1.amazonaws.com/SimpleNotificationService-abc.pem",
                "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem",
                "https://sns.eu-west-1.amazonaws.com.evil.example/x.pem",
                "https://user@sns.eu-west-1.amazonaws.com/x.pem", "http://127.0.0.1:9/cert.pem"):
        with pytest.raises(ValueError, match="certificate URL"):
            push.checked_fields({**base, "SigningCertURL": url})


async def test_check_reaches_ses_and_webhooks_status_reads_its_rows(ses: SesStack):
    from operations.check import check_provider
    from operations.webhooks import webhooks_status

    await subscribed(ses)
    result = await check_provider(ses.settings)
    assert result.ok and result.service == "Amazon SES" and "0 of 50000 sent in 24 h, 14/s" in result.detail
    assert await post(ses.url, {"Type": "Notification"}) == 400
    await ses.receiver.flush_refusals()
    status = await webhooks_status(ses.settings)
    assert status["refusals"]["SNS field Message missing"]["count"] == 1


async def test_serve_under_ses_needs_no_mailgun_key_and_lists_the_ses_route(ses: SesStack):
    """`pressroom serve` asks for what the configured provider needs (SES: its topic), not Mailgun's key."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("MAILGUN_")}
    env.update({"DATABASE_URL": ses.settings.database_url, "PRESSROOM_EMAIL_PROVIDER": "ses",
                "PRESSROOM_MEMBERS_LINK_SECRET": "serve-test-secret", "PRESSROOM_LOG_FORMAT": "text"})
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "starter", "serve", "--port", str(port), cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        said = []
        while not said or "front door on" not in said[-1]:
            line = await asyncio.wait_for(server.stdout.readline(), 120)
            assert line, "pressroom serve ended before listening:\n" + "".join(said)
            said.append(line.decode())
        assert "/webhooks/ses" in said[-1] and "/webhooks/mailgun" not in said[-1]
        assert await post(f"http://127.0.0.1:{port}/webhooks/ses", {"Type": "Notification"}) == 400
        assert await post(f"http://127.0.0.1:{port}/webhooks/mailgun", {}) == 404
    finally:
        server.terminate()
        await server.wait()

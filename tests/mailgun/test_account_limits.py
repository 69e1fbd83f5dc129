"""A new, probation or small-plan account over real HTTP: the simulator refuses as Mailgun words it,
and the client tells a refusal for size apart from a rate limit."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from devstack.mailgun_simulator import MailgunSimulator
from pressroom.providers.mailgun import MailgunClient
from pressroom.providers.port import ProviderRateLimited, RecipientLimitExceeded

from .conftest import API_KEY
from .test_client import event_pages, send

FALLBACK = "fallback.client.test"


async def test_a_probation_account_refuses_more_than_its_recipient_limit(sim: MailgunSimulator, client):
    sim.set_limits(recipient_limit=10)
    with pytest.raises(RecipientLimitExceeded) as refused:
        await send(client, 11)
    assert refused.value.status_code == 420 and "recipient limit exceeded" in str(refused.value)
    assert refused.value.limit is None and not refused.value.retryable
    await send(client, 10, start=100)
    assert sim.stats()["recipients"] == 10  # the refused message was not stored


async def test_large_batches_are_refused_with_403(sim: MailgunSimulator, client):
    sim.set_limits(large_batch_limit=5)
    with pytest.raises(RecipientLimitExceeded) as refused:
        await send(client, 6)
    assert refused.value.status_code == 403 and "large batches" in str(refused.value)
    await send(client, 5, start=100)


async def test_an_hourly_cap_answers_420_until_the_next_hour(sim: MailgunSimulator, client):
    now = sim.now()
    sim.advance(3600 - now % 3600 - 120)  # two minutes before the simulator's hour ends
    hour_ends = sim.now() + 120
    sim.set_limits(hourly_limit=20)
    await send(client, 15)
    with pytest.raises(ProviderRateLimited) as limited:
        await send(client, 10, start=100)
    assert limited.value.status_code == 420 and "hourly sending limit exceeded" in str(limited.value)
    # "try again after" names the next hour of the simulator's clock (the client counts from its own).
    assert abs(limited.value.retry_after - (hour_ends - time.time())) < 5
    sim.advance(121)
    await send(client, 10, start=100)
    assert sim.stats()["recipients"] == 25


async def test_a_daily_cap_counts_each_domain_on_its_own(sim: MailgunSimulator, client):
    sim.add_domain(FALLBACK)
    sim.set_limits(daily_limit=10)
    fallback = client.for_scope(FALLBACK)
    await send(client, 10)
    with pytest.raises(ProviderRateLimited, match="daily sending limit exceeded"):
        await send(client, 1, start=50)
    await send(fallback, 10, start=100)  # the fallback domain has its own day
    with pytest.raises(ProviderRateLimited):
        await send(fallback, 1, start=200)
    assert {m.domain for m in sim.messages} == {client.domain, FALLBACK}


async def test_each_domain_serves_its_own_events(sim: MailgunSimulator, client):
    sim.add_domain(FALLBACK)
    fallback = client.for_scope(FALLBACK)
    await send(client, 3, email_id="custom")
    await send(fallback, 4, start=100, email_id="warm")
    sim.advance(60)
    custom_events = [e for page in await event_pages(client, event="accepted") for e in page]
    fallback_events = [e for page in await event_pages(fallback, event="accepted") for e in page]
    assert {e["user-variables"]["email-id"] for e in custom_events} == {"custom"} and len(custom_events) == 3
    assert {e["user-variables"]["email-id"] for e in fallback_events} == {"warm"} and len(fallback_events) == 4
    with pytest.raises(Exception, match="404"):
        await send(client.for_scope("unknown.client.test"), 1)


async def test_the_limits_are_switched_over_the_admin_api(sim: MailgunSimulator):
    async with httpx.AsyncClient(base_url=sim.base_url) as http:
        answer = await http.post("/_sim/limits", json={"recipient_limit": 10, "daily_limit": 500})
        assert answer.json()["recipient_limit"] == 10 and answer.json()["daily_limit"] == 500
        assert (await http.post("/_sim/limits", json={"daily_limit": -1})).status_code == 400
        assert (await http.post("/_sim/domains", json={"domain": FALLBACK})).json()["domains"] == sorted(
            [sim.domain, FALLBACK])
        await http.post("/_sim/reset")
    assert sim.limits.recipient_limit == 0 and sim.domains == {sim.domain}


async def test_mailguns_stated_limit_is_kept():
    """Mailgun's 400 "Only N recipients per request is allowed on probation" names the size to use."""
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, content=json.dumps({"message": "Rejected: Only 10 recipients per request is "
                                                                  "allowed on probation."}))

    async with MailgunClient(base_url="https://api.mailgun.net", api_key=API_KEY, domain="mg.x.test",
                             transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(RecipientLimitExceeded) as refused:
            await send(client, 20)
    assert refused.value.limit == 10 and refused.value.status_code == 400

"""The email provider port's contract, run the same way against every implementation: the in-memory
provider (the fast tier's), Mailgun's client against the Mailgun simulator and SES's client against
the SES stand-in, both over real HTTP.

SES has nothing to poll: its harness plays the receiver, taking the stand-in's signed SNS
notifications visible by now through the SES push's checks and keeping the acceptances
(`ReceivedEvents`), which is all an SES send can be confirmed from. The tests of reading events a
page at a time run for the providers that poll.

Each test uses the port only (send, find_accepted, read_events, parse_event, remove_suppressions,
register_push, for_scope); a `Harness` plays each implementation's worst cases with its own switches
(the simulator's faults, the memory provider's `Faults`) and reads what a recipient received.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from devstack.servers import free_port
from pressroom.delivery_events import DeliveryEvent
from pressroom.providers.mailgun import MailgunClient
from pressroom.providers.memory import MemoryProvider
from pressroom.providers.port import (
    CONFIRM_BY_QUERY,
    NOT_ACCEPTED,
    UNCERTAIN,
    EmailProvider,
    EventQuery,
    Message,
    ProviderRateLimited,
    ProviderUnavailable,
    RecipientLimitExceeded,
    TooManyRecipients,
    placeholder,
)
from pressroom.providers.received import MemoryAcceptances
from pressroom.providers.ses import SesClient
from pressroom.providers.ses.push import SesPush

FROM = "Pressroom <news@example.com>"


class MemoryHarness:
    def __init__(self) -> None:
        self.provider = MemoryProvider("mail.contract.test")

    def now(self) -> float:
        return self.provider.now()

    def advance(self, seconds: float) -> None:
        self.provider.advance(seconds)

    def lose_next_answer(self) -> None:
        self.provider.faults.lost_answers = 1

    def rate_limit(self, retry_after: float) -> None:
        self.provider.faults.rate_limited, self.provider.faults.retry_after = 1, retry_after

    def limit_recipients(self, limit: int) -> None:
        self.provider.faults.recipient_limit = limit

    def delay_events(self, seconds: float) -> None:
        self.provider.faults.events_delay = seconds

    def suppress(self, address: str) -> None:
        self.provider.suppress(address, "bounces")

    def add_scope(self, scope: str) -> None:
        pass

    def received(self, address: str) -> tuple[str, str, str]:
        return next(sent.personalised(address) for sent in self.provider.sent if address in sent.recipients)

    async def unreachable(self) -> EmailProvider:
        self.provider.faults.outage = True
        return self.provider


class MailgunHarness:
    def __init__(self, simulator, client: MailgunClient) -> None:
        self.simulator, self.provider = simulator, client
        # Every recipient delivered, nobody failing or opening: the same events as the memory provider's.
        simulator.set_rates(failed_permanent=0.0, failed_temporary=0.0, opened=0.0, unsubscribed=0.0, complained=0.0)

    def now(self) -> float:
        return self.simulator.now()

    def advance(self, seconds: float) -> None:
        self.simulator.advance(seconds)

    def lose_next_answer(self) -> None:
        self.simulator.set_faults(lost_response_rate=1.0)

    def rate_limit(self, retry_after: float) -> None:
        self.simulator.set_faults(rate_limit_rate=1.0, retry_after_seconds=retry_after)

    def limit_recipients(self, limit: int) -> None:
        self.simulator.set_limits(recipient_limit=limit)

    def delay_events(self, seconds: float) -> None:
        self.simulator.set_faults(storage_delay_seconds=seconds)

    def suppress(self, address: str) -> None:
        self.simulator.suppress("bounces", address)

    def add_scope(self, scope: str) -> None:
        self.simulator.add_domain(scope)

    def received(self, address: str) -> tuple[str, str, str]:
        return next(message.received_by(address) for message in self.simulator.messages
                    if address in message.recipients)

    async def unreachable(self) -> EmailProvider:
        # Nothing listens on this port: the connection is refused, the request never written.
        return MailgunClient(base_url=f"http://127.0.0.1:{free_port()}", api_key=self.simulator.api_key,
                             domain=self.simulator.domain, timeout=5.0)


class SimulatorReceived:
    """The receiver's part, in-process: before each lookup, the notifications SNS would have pushed
    by now go through the SES push's checks (signature, certificate, topic, age) into the kept
    acceptances; each notification once."""

    def __init__(self, simulator) -> None:
        self.simulator, self.kept, self.taken = simulator, MemoryAcceptances(), set()
        self.push = SesPush(topic_arn=simulator.topic_arn, region=simulator.region,
                            dev_certificate=simulator.certificate_pem)

    async def receive(self) -> None:
        for body in self.simulator.notifications():
            message = self.push.checked_fields(body)
            pushed = self.push.verify_with(message, await self.push.certificate(message["SigningCertURL"]),
                                           self.simulator.now(), 3600)
            if pushed.identity in self.taken:
                continue
            self.taken.add(pushed.identity)
            event = self.push.parse_event(pushed.item)
            if event.kind == "accepted":
                from pressroom.providers.ses.events import marks_of

                await self.kept.keep("ses", event.recipient, marks_of(pushed.item["event"]),
                                     event.provider_message_id, datetime.fromtimestamp(event.timestamp, UTC))

    async def keep(self, *args, **kwargs) -> None:
        await self.kept.keep(*args, **kwargs)

    async def find(self, provider: str, **query):
        await self.receive()
        return await self.kept.find(provider, **query)

    async def find_each(self, provider: str, **query):
        await self.receive()
        return await self.kept.find_each(provider, **query)


class SesHarness:
    def __init__(self, simulator, client: SesClient) -> None:
        self.simulator, self.provider = simulator, client

    def now(self) -> float:
        return self.simulator.now()

    def advance(self, seconds: float) -> None:
        self.simulator.advance(seconds)

    def lose_next_answer(self) -> None:
        self.simulator.set_faults(lost_answers=1)

    def rate_limit(self, retry_after: float) -> None:
        self.simulator.set_faults(throttled=1)  # SES says no time: the client waits a second

    def limit_recipients(self, limit: int) -> None:
        self.simulator.set_faults(recipient_limit=limit)

    def delay_events(self, seconds: float) -> None:
        self.simulator.set_faults(events_delay=seconds)

    def suppress(self, address: str) -> None:
        self.simulator.suppress(address, "BOUNCE")

    def add_scope(self, scope: str) -> None:
        pass

    def received(self, address: str) -> tuple[str, str, str]:
        return self.simulator.received(address)

    async def unreachable(self) -> EmailProvider:
        return SesClient(endpoint=f"http://127.0.0.1:{free_port()}", region=self.simulator.region,
                         access_key_id="AKIAUNREACHABLE", secret_access_key="x", domain=self.simulator.domain,
                         configuration_set="pressroom", timeout=5.0)


@pytest.fixture
async def ses_simulator():
    from devstack.ses_simulator import running_ses_simulator

    async with running_ses_simulator() as simulator:
        simulator.send_confirmations = False
        yield simulator


@pytest.fixture
async def ses_harness(ses_simulator) -> AsyncIterator[SesHarness]:
    """SES's client against a fresh stand-in, confirming from the notifications it pushes."""
    async with SesClient(endpoint=ses_simulator.base_url, region=ses_simulator.region,
                         access_key_id=ses_simulator.access_key_id,
                         secret_access_key=ses_simulator.secret_access_key, domain=ses_simulator.domain,
                         configuration_set=ses_simulator.configuration_set, topic_arn=ses_simulator.topic_arn,
                         sns_endpoint=f"{ses_simulator.base_url}/sns", received=SimulatorReceived(ses_simulator),
                         timeout=5.0) as client:
        yield SesHarness(ses_simulator, client)


@pytest.fixture
def memory_harness() -> MemoryHarness:
    return MemoryHarness()


@pytest.fixture
async def mailgun_harness(mailgun) -> AsyncIterator[MailgunHarness]:
    """Mailgun's client against the session's simulator, reset."""
    async with MailgunClient(base_url=mailgun.base_url, api_key=mailgun.api_key, domain=mailgun.domain,
                             timeout=5.0) as client:
        yield MailgunHarness(mailgun, client)


@pytest.fixture(params=["memory_harness", "mailgun_harness", "ses_harness"])
def harness(request) -> MemoryHarness | MailgunHarness | SesHarness:
    return request.getfixturevalue(request.param)


@pytest.fixture(params=["memory_harness", "mailgun_harness"])
def polling_harness(request) -> MemoryHarness | MailgunHarness:
    """The providers whose events can be read a page at a time (`capabilities.polls_events`)."""
    harness = request.getfixturevalue(request.param)
    assert harness.provider.capabilities.polls_events
    return harness


def message(provider: EmailProvider, *, tags: tuple[str, ...] = ("bulk-email",)):
    return provider.prepare(Message(
        from_address=FROM, subject=f"Hello {placeholder('name')}", tags=tags,
        html=f"<p>Hi {placeholder('name_html')}</p><a href=\"{placeholder('unsubscribe_url')}\">leave</a>",
        text=f"Hi {placeholder('name')}", headers={"List-Unsubscribe": f"<{placeholder('unsubscribe_url')}>"}))


def readers(count: int, prefix: str = "reader") -> dict[str, dict[str, str]]:
    return {f"{prefix}{n}@example.com": {"name": f"Reader {n}", "name_html": f"Reader &lt;{n}&gt;",
                                         "unsubscribe_url": f"https://site.example/unsubscribe/?uuid=u{n}"}
            for n in range(count)}


def window(harness, before: float = 60, after: float = 60) -> tuple[datetime, datetime]:
    now = datetime.fromtimestamp(harness.now(), tz=UTC)
    return now - timedelta(seconds=before), now + timedelta(seconds=after)


async def test_a_send_is_accepted_each_reader_gets_their_values_and_the_mark_proves_it(harness):
    provider = harness.provider
    recipients = readers(3)
    begin, _ = window(harness)
    sent = await provider.send(message(provider), recipients, mark={"email-id": "e1", "pressroom-batch": "b1"},
                               message_id=provider.message_id("b1"))
    assert sent.provider_id and set(sent.accepted) == set(recipients) and not sent.refused
    provider_id = sent.accepted["reader0@example.com"]
    subject, html, text = harness.received("reader1@example.com")
    assert (subject, text) == ("Hello Reader 1", "Hi Reader 1")
    assert "<p>Hi Reader &lt;1&gt;</p>" in html and 'href="https://site.example/unsubscribe/?uuid=u1"' in html
    harness.advance(5)
    _, end = window(harness)
    found = await provider.find_accepted(recipient="reader0@example.com", mark={"pressroom-batch": "b1"},
                                         begin=begin, end=end)
    assert found == provider_id
    assert await provider.find_accepted(recipient="reader0@example.com", mark={"pressroom-batch": "b2"},
                                        begin=begin, end=end) is None
    if provider.capabilities.confirms_by != CONFIRM_BY_QUERY:
        return  # SES writes its own Message-ID: only the marks can prove a send
    # Our own Message-Id proves it too, whatever the mark.
    assert await provider.find_accepted(recipient="reader0@example.com", mark={"pressroom-batch": "other"},
                                        begin=begin, end=end, message_id=provider.message_id("b1")) == provider_id


async def test_each_recipients_acceptance_is_found_where_the_provider_answers_each_apart(harness):
    provider = harness.provider
    recipients = readers(3, prefix="each")
    begin, _ = window(harness)
    sent = await provider.send(message(provider), recipients, mark={"pressroom-batch": "b9"})
    harness.advance(5)
    _, end = window(harness)
    found = await provider.find_accepted_each(recipients=[*recipients, "nobody@example.com"],
                                              mark={"pressroom-batch": "b9"}, begin=begin, end=end)
    if found is None:  # a call accepted whole: find_accepted of one recipient speaks for all
        assert provider.name != "ses"
        return
    assert dict(found) == dict(sent.accepted)
    assert not await provider.find_accepted_each(recipients=list(recipients), mark={"pressroom-batch": "b10"},
                                                 begin=begin, end=end)


async def test_an_answer_lost_after_acceptance_is_uncertain_and_found_by_its_mark(harness):
    provider = harness.provider
    begin, _ = window(harness)
    harness.lose_next_answer()
    with pytest.raises(ProviderUnavailable) as caught:
        await provider.send(message(provider), readers(2), mark={"pressroom-batch": "b7"})
    assert caught.value.outcome == UNCERTAIN and caught.value.details.may_have_been_accepted
    harness.advance(5)
    _, end = window(harness)
    assert await provider.find_accepted(recipient="reader1@example.com", mark={"pressroom-batch": "b7"},
                                        begin=begin, end=end)


async def test_a_rate_limit_is_not_accepted_and_says_when_to_come_back(harness):
    provider = harness.provider
    begin, _ = window(harness)
    harness.rate_limit(30)
    with pytest.raises(ProviderRateLimited) as caught:
        await provider.send(message(provider), readers(2), mark={"pressroom-batch": "b3"})
    assert caught.value.outcome == NOT_ACCEPTED and caught.value.retryable
    assert caught.value.details.retry_after is not None and 0 < caught.value.details.retry_after <= 31
    harness.advance(5)
    _, end = window(harness)
    assert await provider.find_accepted(recipient="reader0@example.com", mark={"pressroom-batch": "b3"},
                                        begin=begin, end=end) is None


async def test_an_unreachable_provider_accepted_nothing_and_its_events_cannot_be_read(harness):
    provider = await harness.unreachable()
    try:
        with pytest.raises(ProviderUnavailable) as caught:
            await provider.send(message(provider), readers(1), mark={"pressroom-batch": "b4"})
        assert caught.value.outcome == NOT_ACCEPTED and caught.value.retryable
        begin, end = window(harness)
        if not provider.capabilities.polls_events:
            return  # nothing to read from the provider: its events come pushed
        with pytest.raises(ProviderUnavailable):
            await provider.read_events(None, EventQuery(begin=begin, end=end))
    finally:
        await provider.aclose()


async def test_the_account_answers_a_check_and_states_its_quota_or_nothing(harness):
    from pressroom.providers.port import AccountQuota, ProviderError

    provider = harness.provider
    assert await provider.check_account()
    quota = await provider.account_quota()
    assert isinstance(quota, AccountQuota)
    if quota.room_today is not None:  # the provider counts its rolling day (SES): the room is what is left of it
        assert quota.room_today == quota.per_day - quota.sent_last_24_hours
    unreachable = await harness.unreachable()
    try:
        with pytest.raises(ProviderError):
            await unreachable.check_account()
    finally:
        await unreachable.aclose()


async def test_a_batch_too_large_for_the_account_is_refused_whole_and_a_smaller_one_goes(harness):
    provider = harness.provider
    harness.limit_recipients(2)
    with pytest.raises(RecipientLimitExceeded) as caught:
        await provider.send(message(provider), readers(3), mark={"pressroom-batch": "b5"})
    assert caught.value.outcome == NOT_ACCEPTED and not caught.value.retryable
    assert caught.value.details.limit in (None, 2)
    assert await provider.send(message(provider), readers(2), mark={"pressroom-batch": "b5-1"})


async def test_more_recipients_than_a_message_takes_are_refused_before_any_request(harness):
    provider = harness.provider
    with pytest.raises(TooManyRecipients):
        await provider.send(message(provider), readers(provider.limits.max_recipients + 1), mark={})


async def test_late_events_are_not_found_until_they_are_visible(harness):
    provider = harness.provider
    begin, _ = window(harness)
    harness.delay_events(120)
    provider_id = (await provider.send(message(provider), readers(1), mark={"pressroom-batch": "b6"})).accepted[
        "reader0@example.com"]
    harness.advance(5)
    _, end = window(harness)
    assert await provider.find_accepted(recipient="reader0@example.com", mark={"pressroom-batch": "b6"},
                                        begin=begin, end=end) is None  # not visible yet: not "not accepted"
    harness.advance(180)
    assert await provider.find_accepted(recipient="reader0@example.com", mark={"pressroom-batch": "b6"},
                                        begin=begin, end=end) == provider_id


async def test_events_are_read_page_by_page_and_parse_to_delivery_events_with_our_marks(polling_harness):
    harness = polling_harness
    provider = harness.provider
    begin, _ = window(harness)
    await provider.send(message(provider, tags=("bulk-email", "site-a")), readers(7),
                        mark={"email-id": "e9", "pressroom-batch": "b9"})
    await provider.send(message(provider, tags=("bulk-email",)), readers(2, "other"),
                        mark={"email-id": "e8", "pressroom-batch": "b8"})
    harness.advance(10)
    _, end = window(harness, after=0)
    query = EventQuery(begin=begin, end=end, names=("delivered",), tags=("bulk-email", "site-a"), limit=3)
    parsed, pages, page = [], 0, None
    while True:
        events = await provider.read_events(page, query)
        pages += 1
        batch = [provider.parse_event(item) for item in events.items]
        assert all(isinstance(event, DeliveryEvent) for event in batch)
        if batch:
            assert events.last_timestamp == batch[-1].timestamp
        parsed += batch
        page = events.next_page
        if page is None or not events.items:
            break
    assert pages >= 3
    assert sorted(event.recipient for event in parsed) == sorted(readers(7))
    assert {(event.kind, event.email_id, event.batch_id, event.provider) for event in parsed} \
        == {("delivered", "e9", "b9", provider.name)}
    assert [event.timestamp for event in parsed] == sorted(event.timestamp for event in parsed)


async def test_a_scope_sends_under_its_own_message_ids_and_reads_only_its_own_events(polling_harness):
    harness = polling_harness
    harness.add_scope("fallback.contract.test")
    main, fallback = harness.provider, harness.provider.for_scope("fallback.contract.test")
    assert fallback.scope == "fallback.contract.test" and main.for_scope(main.scope) is main
    assert fallback.message_id("b1") != main.message_id("b1") and fallback.message_id("b1").endswith(fallback.scope)
    begin, _ = window(harness)
    await fallback.send(message(fallback), readers(2), mark={"pressroom-batch": "f1"})
    harness.advance(5)
    _, end = window(harness, after=0)
    on_main = await main.read_events(None, EventQuery(begin=begin, end=end, names=("delivered",)))
    on_fallback = await fallback.read_events(None, EventQuery(begin=begin, end=end, names=("delivered",)))
    assert on_main.items == [] and len(on_fallback.items) == 2


async def test_suppressions_are_removed_once(harness):
    provider = harness.provider
    harness.suppress("bounced@example.com")
    assert await provider.remove_suppressions("bounced@example.com") == ["bounces"]
    assert await provider.remove_suppressions("bounced@example.com") == []


async def test_pushed_events_are_registered_once_per_kind(harness):
    provider = harness.provider
    first = await provider.register_push("https://hooks.example.com/one")  # SES: one subscription for all kinds
    assert first and set(first.values()) == {"created"}
    assert set((await provider.register_push("https://hooks.example.com/one")).values()) == {"unchanged"}
    assert set((await provider.register_push("https://hooks.example.com/two")).values()) == {"added"}

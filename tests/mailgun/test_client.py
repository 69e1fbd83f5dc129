"""The Mailgun client against the simulator over real HTTP: sends, errors, secrecy and event paging."""

from __future__ import annotations

import base64
import socket
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from devstack.mailgun_simulator import MailgunSimulator
from pressroom.providers.mailgun import MailgunClient, message_fields
from pressroom.providers.port import (
    ProviderBadResponse,
    ProviderError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderUnavailable,
    TooManyRecipients,
)
from pressroom.settings import load_settings

from .conftest import API_KEY, DOMAIN

FROM = "Pressroom <news@mg.client.test>"


def members(count: int, start: int = 0) -> tuple[list[str], dict[str, dict[str, str]]]:
    addresses = [f"member{n}@example.com" for n in range(start, start + count)]
    return addresses, {a: {"member_uuid": f"uuid-{a.split('@')[0]}", "name": f"M {a[:8]}"} for a in addresses}


async def send(client: MailgunClient, count: int = 3, *, start: int = 0, email_id: str = "e1",
               marks: dict[str, str] | None = None, **extra) -> str:
    to, variables = members(count, start)
    return await client.send_batch(from_address=FROM, to=to, subject="Issue 1", html="<p>Hi %recipient.name%</p>",
                                   text="Hi %recipient.name%", recipient_variables=variables,
                                   variables={"email-id": email_id, **(marks or {})}, **extra)


async def event_pages(client: MailgunClient, **query) -> list[list[dict]]:
    """Every page, failing instead of hanging if the paging never ends."""
    begin = query.pop("begin", datetime.now(UTC) - timedelta(days=1))
    pages = []
    async for page in client.events(begin=begin, **query):
        pages.append(page)
        assert len(pages) < 500, "the events paging does not end"
    return pages


async def all_events(client: MailgunClient, **query) -> list[dict]:
    return [item for page in await event_pages(client, **query) for item in page]


def assert_secret_kept(error: BaseException, *addresses: str) -> None:
    basic = base64.b64encode(f"api:{API_KEY}".encode()).decode()
    for text in (str(error), repr(error)):
        assert API_KEY not in text and basic not in text
        assert "\n" not in text
        for address in addresses:
            assert address not in text


# --- sending ---

async def test_a_batch_of_1000_is_one_message_with_each_recipient_once(client, sim: MailgunSimulator):
    message_id = await send(client, 1000, tags=["newsletter", "post-p1"])

    assert not message_id.startswith("<") and message_id.endswith(f"@{DOMAIN}")
    async with httpx.AsyncClient() as admin:
        stored = (await admin.get(f"{sim.base_url}/_sim/messages")).json()
    assert len(stored) == 1 and stored[0]["id"] == message_id
    assert stored[0]["variables"] == {"email-id": "e1"} and stored[0]["tags"] == ["newsletter", "post-p1"]
    _, expected = members(1000)
    recipients = stored[0]["recipients"]
    assert len(recipients) == 1000
    assert {r["address"]: r["variables"] for r in recipients} == expected


async def test_shared_fields_encoded_once_carry_any_text_intact(client, sim: MailgunSimulator):
    """multipart/form-data: bodies with CRLF, '&', '=', '%', '+' and non-ASCII arrive as written,
    for every batch sent with the same encoded fields."""
    html = "<p>Grüße & 100% = 1+1\r\n--not-a-boundary</p>"
    fields = message_fields(from_address=FROM, subject="Ünïcode & more", html=html, text="a=b&c\r\nd",
                            tags=["newsletter"], headers={"Reply-To": "reply@example.com"}, tracking_opens=False)
    for start in (0, 3):
        to, variables = members(3, start)
        variables[to[0]]["name"] = "Zoë \"Q\" & co"
        await client.send_fields(fields, to=to, recipient_variables=variables, variables={"email-id": "e1"},
                                 headers={"Message-Id": f"<b{start}@{DOMAIN}>"})

    assert [list(m.recipients) for m in sim.messages] == [members(3, 0)[0], members(3, 3)[0]]
    for message in sim.messages:
        assert (message.html, message.text, message.subject) == (html, "a=b&c\r\nd", "Ünïcode & more")
        assert message.headers["Reply-To"] == "reply@example.com" and message.tags == ("newsletter",)
        assert message.options["tracking-opens"] == "no"
        assert message.recipient_variables()[message.recipients[0]]["name"] == "Zoë \"Q\" & co"


async def test_an_address_with_a_comma_is_refused_before_any_request(client, sim: MailgunSimulator):
    with pytest.raises(ProviderRejected, match="comma"):
        await client.send_batch(
            from_address=FROM, to=["a@example.com", '"b,c"@example.com'], subject="s", html="h", text="t",
            recipient_variables={})
    assert sim.request_counts["messages"] == 0


async def test_message_options_reach_mailgun(client, sim: MailgunSimulator):
    when = datetime(2031, 5, 4, 12, 30, tzinfo=UTC)
    message_id = await send(client, headers={"Message-Id": "<e1-batch-1@mg.client.test>", "X-Campaign": "c"},
                            delivery_time=when, tracking_opens=False, test_mode=True)

    assert message_id == "e1-batch-1@mg.client.test"  # h:Message-Id lets a sender reconcile a lost answer
    (stored,) = sim.messages
    assert stored.headers["X-Campaign"] == "c" and stored.test_mode
    assert stored.delivery_time == when.timestamp()


async def test_1001_recipients_are_refused_before_any_request(client, sim: MailgunSimulator):
    with pytest.raises(TooManyRecipients) as caught:
        await send(client, 1001)

    assert caught.value.status_code is None and not caught.value.retryable
    assert isinstance(caught.value, ProviderRejected)
    assert "1001" in str(caught.value)
    assert_secret_kept(caught.value, "member0@example.com")
    assert sim.request_counts["messages"] == 0 and sim.messages == []


async def test_more_than_three_tags_are_refused_before_any_request(client, sim: MailgunSimulator):
    with pytest.raises(ProviderRejected, match="at most 3 tags"):
        await send(client, tags=["a", "b", "c", "d"])
    assert sim.request_counts["messages"] == 0


async def test_a_wrong_key_is_a_401_rejection_without_the_key(sim: MailgunSimulator):
    wrong = "key-wrong-3b1d9e44aa"
    async with MailgunClient(base_url=sim.base_url, api_key=wrong, domain=DOMAIN) as client:
        with pytest.raises(ProviderRejected) as caught:
            await send(client)

    error = caught.value
    assert error.status_code == 401 and not error.retryable
    assert "MAILGUN_API_KEY" in str(error)
    assert wrong not in str(error) and wrong not in repr(error)
    assert sim.messages == []


async def test_an_unknown_domain_is_a_404_rejection(sim: MailgunSimulator):
    async with MailgunClient(base_url=sim.base_url, api_key=API_KEY, domain="mg.other.test") as client:
        with pytest.raises(ProviderRejected) as caught:
            await send(client)
    assert caught.value.status_code == 404 and "MAILGUN_DOMAIN" in str(caught.value)


async def test_a_400_carries_mailguns_explanation_in_one_line(client):
    with pytest.raises(ProviderRejected) as caught:
        await client.send_batch(from_address=FROM, to=["a@example.com"], subject="", html="<p>x</p>", text="x",
                                recipient_variables={})
    assert str(caught.value) == "Mailgun rejected the message (400): subject parameter is missing"
    assert caught.value.status_code == 400 and not caught.value.retryable


async def test_a_429_with_a_retry_date_is_rate_limited_for_that_long(client, sim: MailgunSimulator):
    sim.set_faults(rate_limit_rate=1.0, retry_after_seconds=30)

    with pytest.raises(ProviderRateLimited) as caught:
        await send(client)

    error = caught.value
    assert error.status_code == 429 and error.retryable
    assert error.retry_after is not None and 28 <= error.retry_after <= 31
    assert sim.messages == []


@pytest.mark.parametrize("header, low, high", [("12", 12, 12), ("http-date", 50, 61)])
async def test_a_retry_after_header_is_read_as_seconds_or_a_date(header: str, low: float, high: float):
    if header == "http-date":
        header = format_datetime(datetime.now(UTC) + timedelta(seconds=60), usegmt=True)

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"Retry-After": header}, json={"message": "Too many requests"})

    async with MailgunClient(base_url="https://api.mailgun.net", api_key=API_KEY, domain=DOMAIN,
                             transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(ProviderRateLimited) as caught:
            await send(client)
    assert low <= caught.value.retry_after <= high


async def test_a_500_is_unavailable_and_may_have_been_accepted(client, sim: MailgunSimulator):
    sim.set_faults(error_rate=1.0)

    with pytest.raises(ProviderUnavailable) as caught:
        await send(client)

    assert caught.value.status_code == 500 and caught.value.retryable and caught.value.may_have_been_accepted


async def test_a_lost_response_is_unavailable_but_the_message_was_stored(client, sim: MailgunSimulator):
    sim.set_faults(lost_response_rate=1.0)

    with pytest.raises(ProviderUnavailable) as caught:
        await send(client, headers={"Message-Id": "<e1-b1@mg.client.test>"})

    assert caught.value.retryable and caught.value.may_have_been_accepted
    assert caught.value.status_code is None
    assert [m.id for m in sim.messages] == ["e1-b1@mg.client.test"]


async def test_a_refused_connection_was_certainly_not_accepted():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    async with MailgunClient(base_url=f"http://127.0.0.1:{port}", api_key=API_KEY, domain=DOMAIN) as client:
        with pytest.raises(ProviderUnavailable) as caught:
            await send(client)
    assert caught.value.retryable and caught.value.may_have_been_accepted is False


async def test_a_2xx_without_an_id_is_a_bad_response():
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"message": "Queued. Thank you."})

    async with MailgunClient(base_url="https://api.mailgun.net", api_key=API_KEY, domain=DOMAIN,
                             transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(ProviderBadResponse, match="no message id") as caught:
            await send(client)
    assert caught.value.retryable


async def test_no_error_text_carries_the_key_or_an_address(sim: MailgunSimulator):
    """Every failure path, one after the other: the key and member addresses never leak."""
    caught: list[ProviderError] = []

    async def attempt(client: MailgunClient, **extra) -> None:
        try:
            await send(client, **extra)
        except ProviderError as error:
            caught.append(error)

    def echo(request: httpx.Request) -> httpx.Response:  # a proxy that repeats everything it got
        text = f"bad {request.headers['authorization']} {API_KEY} for member0@example.com"
        return httpx.Response(400, json={"message": text})

    async with MailgunClient(base_url=sim.base_url, api_key=API_KEY, domain=DOMAIN) as client:
        for faults in ({"error_rate": 1.0}, {"rate_limit_rate": 1.0}, {"lost_response_rate": 1.0}):
            sim.reset()
            sim.set_faults(**faults)
            await attempt(client)
        sim.reset()
        await attempt(client, tags=["1", "2", "3", "4"])
        sim.set_faults(malformed_events=True)
        try:
            await client.events_page(None, begin=datetime.now(UTC))
        except ProviderError as error:
            caught.append(error)
    for key, domain in ((API_KEY, "mg.other.test"), ("key-wrong", DOMAIN)):
        async with MailgunClient(base_url=sim.base_url, api_key=key, domain=domain) as client:
            await attempt(client)
    async with MailgunClient(base_url="https://api.mailgun.net", api_key=API_KEY, domain=DOMAIN,
                             transport=httpx.MockTransport(echo)) as client:
        await attempt(client)
    try:
        await send(client, 1001)
    except ProviderError as error:
        caught.append(error)

    assert len(caught) == 9
    for error in caught:
        assert_secret_kept(error, "member0@example.com", "member1@example.com")
    assert "MailgunClient" in repr(client) and API_KEY not in repr(client)


async def test_from_settings_reads_the_mailgun_variables(sim: MailgunSimulator):
    settings = load_settings(mailgun_base_url=sim.base_url, mailgun_api_key=API_KEY, mailgun_domain=DOMAIN,
                             mailgun_timeout_seconds=3)
    async with MailgunClient.from_settings(settings) as client:
        assert await send(client)
    assert len(sim.messages) == 1


# --- events ---

async def test_paging_returns_every_event_once_in_ascending_order(client, sim: MailgunSimulator):
    for batch in range(3):
        await send(client, 200, start=batch * 200, email_id=f"e{batch}")
    sim.advance(60)  # every delivery, open and complaint has happened by now

    pages = await event_pages(client, begin=datetime.now(UTC) - timedelta(hours=1),
                              end=datetime.now(UTC) + timedelta(hours=1), limit=97)

    items = [item for page in pages for item in page]
    assert len(pages) > 10 and all(len(page) <= 97 for page in pages)
    assert len(items) == sim.event_count > 1200
    assert len({item["id"] for item in items}) == len(items)
    timestamps = [item["timestamp"] for item in items]
    assert timestamps == sorted(timestamps)
    accepted = [item["recipient"] for item in items if item["event"] == "accepted"]
    outcomes = [item["recipient"] for item in items if item["event"] in ("delivered", "failed")]
    assert sorted(accepted) == sorted(outcomes) == sorted(members(600)[0])
    failed = [item for item in items if item["event"] == "failed"]
    assert failed and all(item["severity"] in ("permanent", "temporary") for item in failed)
    assert {item["user-variables"]["email-id"] for item in items} == {"e0", "e1", "e2"}


async def test_a_saved_page_url_resumes_where_it_stopped(client, sim: MailgunSimulator):
    sim.add_synthetic_events(email_id="e9", count=700, events=["delivered"])
    begin = datetime.now(UTC) - timedelta(days=1)

    first, saved = await client.events_page(None, begin=begin, limit=300)
    assert saved is not None and saved.startswith(sim.base_url)
    async with MailgunClient(base_url=sim.base_url, api_key=API_KEY, domain=DOMAIN) as restarted:
        second, url = await restarted.events_page(saved)
        third, url = await restarted.events_page(url)
        last, _ = await restarted.events_page(url)

    assert (len(first), len(second), len(third), last) == (300, 300, 100, [])
    recipients = [item["recipient"] for item in first + second + third]
    assert sorted(recipients) == sorted(f"member{n}@example.com" for n in range(700))


async def test_the_event_filter_selects_kinds(client, sim: MailgunSimulator):
    await send(client, 300)
    sim.advance(60)
    counts = sim.stats()["events_by_kind"]

    opened = await all_events(client, event="opened")
    outcomes = await all_events(client, event="delivered OR failed")
    others = await all_events(client, event="NOT opened")

    assert opened and {item["event"] for item in opened} == {"opened"}
    assert len(opened) == counts["opened"]
    assert len(outcomes) == 300 and {item["event"] for item in outcomes} == {"delivered", "failed"}
    assert len(others) == sim.event_count - counts["opened"]


async def test_begin_is_inclusive_and_end_exclusive_in_both_directions(client, sim: MailgunSimulator):
    start = 1_700_000_000  # member{n} is delivered at start + 1 + n
    sim.add_synthetic_events(email_id="e1", count=10, events=["delivered"], timestamp=start, spread_seconds=10,
                             chunk=1)

    def at(n: int) -> datetime:
        return datetime.fromtimestamp(start + 1 + n, tz=UTC)

    forward = await all_events(client, begin=at(2), end=at(5), limit=2)
    backward = await all_events(client, begin=at(5), end=at(2), ascending=False, limit=2)

    assert [item["recipient"] for item in forward] == [f"member{n}@example.com" for n in (2, 3, 4)]
    assert [item["recipient"] for item in backward] == [f"member{n}@example.com" for n in (5, 4, 3)]


async def test_late_events_stay_hidden_until_visible(client, sim: MailgunSimulator):
    sim.set_faults(late_event_share=0.5, late_event_seconds=600)
    await send(client, 100, headers={"Message-Id": "<late@mg.client.test>"})

    sim.advance(30)
    early = await all_events(client, event="accepted")
    sim.advance(600)
    later = await all_events(client, event="accepted")

    assert 20 < len(early) < 80  # about half are late, by a deterministic hash
    assert len(later) == 100
    assert {item["id"] for item in early} < {item["id"] for item in later}


async def test_event_user_variables_fill_in_recipient_variables(client, sim: MailgunSimulator):
    to, variables = members(4)
    await client.send_batch(from_address=FROM, to=to, subject="s", html="h", text="t", recipient_variables=variables,
                            variables={"email-id": "e1", "member-uuid": "%recipient.member_uuid%"}, tags=["t1"])

    items = await all_events(client, event="accepted")

    assert {item["recipient"]: item["user-variables"] for item in items} == {
        address: {"email-id": "e1", "member-uuid": variables[address]["member_uuid"]} for address in to}
    assert all(item["tags"] == ["t1"] and item["message"]["headers"]["message-id"] == sim.messages[0].id
               for item in items)


async def test_events_in_the_future_are_not_visible_yet(client, sim: MailgunSimulator):
    await send(client, 10)
    seen = {item["event"] for item in await all_events(client)}
    assert seen == {"accepted"}  # deliveries happen a second after acceptance


async def test_malformed_events_json_is_a_bad_response(client, sim: MailgunSimulator):
    sim.add_synthetic_events(email_id="e1", count=5)
    sim.set_faults(malformed_events=True)

    with pytest.raises(ProviderBadResponse) as caught:
        await all_events(client)

    message = str(caught.value)
    assert "\n" not in message and "events query" in message and "not JSON" in message
    assert caught.value.retryable


async def test_an_events_500_is_unavailable(client, sim: MailgunSimulator):
    sim.set_faults(events_error_rate=1.0)
    with pytest.raises(ProviderUnavailable) as caught:
        await all_events(client)
    assert caught.value.status_code == 500 and caught.value.retryable


async def test_a_page_over_300_and_a_foreign_paging_url_are_refused(client, sim: MailgunSimulator):
    with pytest.raises(ValueError, match="at most 300"):
        await client.events_page(None, begin=datetime.now(UTC), limit=301)
    with pytest.raises(ProviderBadResponse, match="outside"):
        await client.events_page("https://elsewhere.example/v3/mg.client.test/events/abc")
    assert sim.request_counts["events"] == 0


# --- the simulator's own contract ---

async def test_the_simulator_refuses_what_mailgun_refuses(sim: MailgunSimulator):
    url = f"{sim.base_url}/v3/{DOMAIN}/messages"
    base = {"from": FROM, "subject": "s", "text": "t"}
    async with httpx.AsyncClient(auth=("api", API_KEY)) as http:
        too_many = await http.post(url, data={**base, "to": [f"m{n}@x.test" for n in range(1001)]})
        tags = await http.post(url, data={**base, "to": "a@x.test", "o:tag": ["1", "2", "3", "4"]})
        no_body = await http.post(url, data={"from": FROM, "subject": "s", "to": "a@x.test"})
        multipart = await http.post(url, data={**base, "to": ["a@x.test", "b@x.test"]},
                                    files={"attachment": ("a.txt", b"x")})
        wrong = await http.post(url, data={**base, "to": "a@x.test"}, auth=("api", "nope"))

    assert too_many.status_code == 400 and "Too many recipients" in too_many.json()["message"]
    assert tags.status_code == 400 and no_body.status_code == 400
    assert multipart.status_code == 200 and multipart.json()["message"] == "Queued. Thank you."
    assert (wrong.status_code, wrong.text) == (401, "Forbidden")
    assert [list(m.recipients) for m in sim.messages] == [["a@x.test", "b@x.test"]]


async def test_the_simulator_counts_duplicate_recipients(client, sim: MailgunSimulator):
    await send(client, 5, email_id="e1")
    await send(client, 3, email_id="e1")  # a resend of three members
    await send(client, 5, email_id="e2")

    async with httpx.AsyncClient() as admin:
        stats = (await admin.get(f"{sim.base_url}/_sim/stats")).json()
    assert (stats["messages"], stats["recipients"], stats["duplicate_recipients"]) == (3, 13, 3)


# --- the outcome of a send, and look-ups that prove ---

def _raise(error: Exception):
    def answer(request: httpx.Request) -> httpx.Response:
        raise error
    return answer


def _status(code: int, body: dict):
    return lambda request: httpx.Response(code, json=body)


@pytest.mark.parametrize("answer, outcome", [
    (_status(500, {"message": "Internal Server Error"}), "uncertain"),  # Mailgun: a 5xx may still have sent
    (_status(503, {"message": "Service Unavailable"}), "uncertain"),
    (_status(200, {"message": "Queued. Thank you."}), "uncertain"),  # accepted, but no id to prove it
    (_raise(httpx.ReadTimeout("no answer")), "uncertain"),  # the request was written
    (_raise(httpx.RemoteProtocolError("reset")), "uncertain"),
    (_raise(httpx.ReadError("reset")), "uncertain"),
    (_status(429, {"message": "try again after Mon, 23 Nov 2026 02:20:00 UTC"}), "not_accepted"),
    (_status(420, {"message": "sending limit"}), "not_accepted"),
    (_status(400, {"message": "to parameter is missing"}), "not_accepted"),
    (_status(401, {"message": "Forbidden"}), "not_accepted"),
    (_raise(httpx.ConnectError("refused")), "not_accepted"),  # refused, or a name that does not resolve
    (_raise(httpx.ConnectTimeout("no connection")), "not_accepted"),
    (_raise(httpx.WriteError("cut off while writing")), "not_accepted"),  # Mailgun never had the whole form
    (_raise(httpx.WriteTimeout("cut off while writing")), "not_accepted"),
])
async def test_every_failed_send_says_whether_it_may_have_been_accepted(answer, outcome):
    async with MailgunClient(base_url="https://api.mailgun.net", api_key=API_KEY, domain=DOMAIN,
                             transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(ProviderError) as caught:
            await send(client)
    assert caught.value.outcome == outcome


async def test_a_look_up_trusts_only_the_events_own_fields(client, sim: MailgunSimulator):
    """A provider that ignores the filters and assigns its own ids answers with other messages' events."""
    sim.set_faults(ignore_filters=True, assign_own_ids=True)
    window = dict(begin=datetime.now(UTC) - timedelta(minutes=5),
                  end=datetime.now(UTC) + timedelta(minutes=5))
    kept = await send(client, 3, marks={"pressroom-batch": "b1"},
                      headers={"Message-Id": "<b1@mg.client.test>"})
    await send(client, 3, start=3, marks={"pressroom-batch": "b2"})
    assert kept != "b1@mg.client.test"  # the provider's own id

    found = await client.find_accepted(recipient="member0@example.com", mark={"pressroom-batch": "b1"},
                                       message_id="b1@mg.client.test", **window)
    assert found == kept
    # b2 went to other members, b3 was never sent: the events returned are someone else's.
    assert await client.find_accepted(recipient="member0@example.com", mark={"pressroom-batch": "b2"},
                                      **window) is None
    assert await client.find_accepted(recipient="member3@example.com", mark={"pressroom-batch": "b3"},
                                      message_id="b3@mg.client.test", **window) is None


async def test_a_look_up_pages_to_the_end_and_accepts_a_kept_custom_message_id(client, sim: MailgunSimulator):
    sim.set_faults(ignore_filters=True)  # every event of 700 members comes back, 300 a page
    await send(client, 700, email_id="e0")
    await send(client, 1, start=699, headers={"Message-Id": "<legacy@mg.client.test>"})  # no mark of ours
    window = dict(begin=datetime.now(UTC) - timedelta(minutes=5),
                  end=datetime.now(UTC) + timedelta(minutes=5))
    assert await client.find_accepted(recipient="member699@example.com", mark={"pressroom-batch": "x"},
                                      message_id="legacy@mg.client.test", **window) == "legacy@mg.client.test"
    assert sim.request_counts["events"] >= 3


async def test_the_simulator_applies_the_recipient_filter_unless_told_to_ignore_it(client, sim: MailgunSimulator):
    await send(client, 5)
    only = await all_events(client, event="accepted", ascending=True)
    assert len(only) == 5
    items, _ = await client.events_page(None, begin=datetime.now(UTC) - timedelta(minutes=1),
                                        recipient="member2@example.com")
    assert {item["recipient"] for item in items} == {"member2@example.com"}
    sim.set_faults(ignore_filters=True)
    sim.advance(5)  # deliveries are stored a second after acceptance
    items, _ = await client.events_page(None, begin=datetime.now(UTC) - timedelta(minutes=1),
                                        recipient="member2@example.com", event="accepted")
    assert len({item["recipient"] for item in items}) == 5 and {i["event"] for i in items} != {"accepted"}

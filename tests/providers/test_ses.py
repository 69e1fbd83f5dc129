"""SES's pieces one at a time: its events read as DeliveryEvents, its tags and template syntax,
and its error answers as the port's errors (what the exactly-once rules rest on)."""

from __future__ import annotations

import json

import httpx
import pytest

from devstack.ses_simulator import Delivered, SesSimulator
from pressroom.delivery_events import DeliveryEvent, EventRejected
from pressroom.providers.port import (
    NOT_ACCEPTED,
    UNCERTAIN,
    ProviderRateLimited,
    ProviderRejected,
    ProviderUnavailable,
    RecipientLimitExceeded,
)
from pressroom.providers.ses import parse_event, ses_template, tag_text, tag_value
from pressroom.providers.ses.client import SesClient, status_error


def events_of(kind: str) -> dict:
    simulator = SesSimulator()
    copy = Delivered(message_id="0100-abc", address="reader@example.com", subject="", html="", text="", headers={},
                     tags={"email-id": "e1", "pressroom-batch": tag_value("b1.0002")}, accepted_at=1_800_000_000.0)
    simulator.add_event(kind, copy)
    body = simulator.notifications(visible_only=False)[0]
    return {"notification": body["MessageId"], "event": json.loads(body["Message"])}


@pytest.mark.parametrize("kind, expected", [("Send", "accepted"), ("Delivery", "delivered"), ("Open", "opened"),
                                            ("Complaint", "complained"), ("Bounce", "failed-permanent"),
                                            ("Reject", "other"), ("Rendering Failure", "failed-permanent")])
def test_each_ses_event_reads_as_its_kind_with_our_marks(kind, expected):
    item = events_of(kind)
    event = parse_event(item)
    assert isinstance(event, DeliveryEvent)
    assert (event.kind, event.recipient, event.email_id, event.batch_id, event.provider_message_id) == \
        (expected, "reader@example.com", "e1", "b1.0002", "0100-abc")
    assert event.event_id == item["notification"] and event.provider == "ses"
    if kind == "Bounce":
        assert (event.severity, event.code, event.enhanced_code) == ("permanent", 550, "5.1.1")
    if kind == "Rendering Failure":  # that recipient got nothing: a failure, with SES's words and no code
        assert (event.severity, event.code, event.reason) == ("permanent", None, "rendering-failure")
        assert event.message.startswith("SES could not render the message: Attribute 'name'")


@pytest.mark.parametrize("item", [None, {}, {"notification": "n1", "event": None},
                                  {"notification": "n1", "event": {"eventType": "Delivery"}},
                                  {"notification": "n1", "event": {"eventType": "Delivery", "mail": {
                                      "destination": [], "timestamp": "2026-01-01T00:00:00Z"}}},
                                  {"notification": "n1", "event": {"eventType": "Delivery", "mail": {
                                      "destination": ["a@example.com"], "timestamp": "yesterday"}}}])
def test_an_unusable_event_is_set_aside_with_a_reason_never_raised(item):
    rejected = parse_event(item)
    assert isinstance(rejected, EventRejected) and rejected.reason.startswith("unusable event")


def test_marks_survive_the_characters_ses_takes_in_tags():
    for value in ("b1.0002", "a_b", "pressroom-outbox-3f2a", "x@y:z/é"):
        escaped = tag_value(value)
        assert all(char.isascii() and (char.isalnum() or char in "_-") for char in escaped)
        assert tag_text(escaped) == value


def test_placeholders_become_unescaped_handlebars_and_literal_braces_stay_literal():
    assert ses_template("Hi {{recipient.name}}, {{not ours}}") == "Hi {{{name}}}, \\{{not ours}}"


def answer(status: int, kind: str, message: str = "") -> httpx.Response:
    return httpx.Response(status, json={"message": message}, headers={"x-amzn-ErrorType": f"{kind}:http://x"})


def test_ses_answers_map_to_the_ports_errors_and_outcomes():
    daily = status_error(answer(429, "TooManyRequestsException", "Daily message quota exceeded."), "batch")
    assert isinstance(daily, ProviderRateLimited) and daily.retry_after == 3600 and daily.outcome == NOT_ACCEPTED
    rate = status_error(answer(429, "TooManyRequestsException", "Maximum sending rate exceeded."), "batch")
    assert isinstance(rate, ProviderRateLimited) and rate.retry_after == 1.0
    failed = status_error(answer(500, "InternalFailure"), "batch")
    assert isinstance(failed, ProviderUnavailable) and failed.outcome == UNCERTAIN
    assert isinstance(status_error(answer(403, "SignatureDoesNotMatch"), "batch"), ProviderRejected)
    assert isinstance(status_error(answer(400, "LimitExceededException", "Too many destinations"), "batch"),
                      RecipientLimitExceeded)
    refused = status_error(answer(400, "MessageRejected", "Email address is not verified: reader@example.com"), "b")
    assert isinstance(refused, ProviderRejected) and "reader@example.com" not in str(refused)


def test_a_call_answered_per_destination_keeps_what_was_accepted_and_raises_only_when_nothing_was():
    outcome = SesClient._outcome("batch", ["a@example.com", "b@example.com"], [
        {"Status": "SUCCESS", "MessageId": "m-a"}, {"Status": "MESSAGE_REJECTED", "Error": "b@example.com bad"}])
    assert outcome.accepted == {"a@example.com": "m-a"} and "b@example.com" not in outcome.refused["b@example.com"]
    with pytest.raises(ProviderRateLimited) as caught:
        SesClient._outcome("batch", ["a@example.com"], [{"Status": "ACCOUNT_DAILY_QUOTA_EXCEEDED"}])
    assert caught.value.retry_after == 3600
    with pytest.raises(ProviderUnavailable) as caught:
        SesClient._outcome("batch", ["a@example.com"], [{"Status": "TRANSIENT_FAILURE"}])
    assert caught.value.outcome == NOT_ACCEPTED
    with pytest.raises(ProviderRejected):
        SesClient._outcome("batch", ["a@example.com"], [{"Status": "MESSAGE_REJECTED"}])


def test_destinations_refused_for_the_moment_are_named_with_the_wait_and_kept_when_nothing_was_accepted():
    addresses = ["a@example.com", "b@example.com", "c@example.com"]
    outcome = SesClient._outcome("batch", addresses, [
        {"Status": "SUCCESS", "MessageId": "m-a"}, {"Status": "ACCOUNT_THROTTLED"},
        {"Status": "TRANSIENT_FAILURE", "Error": "c@example.com busy"}])
    assert outcome.refused_temporarily == {"b@example.com", "c@example.com"} and outcome.retry_after == 1.0
    assert all("@" not in reason for reason in outcome.refused.values())
    plain = SesClient._outcome("batch", addresses[:1], [{"Status": "SUCCESS", "MessageId": "m-a"}])
    assert plain.retry_after is None and not plain.refused_temporarily
    # Nothing accepted: raised as the account's state, with each destination's answer beside it.
    with pytest.raises(ProviderUnavailable) as caught:  # throttled and transient together: a passing state
        SesClient._outcome("batch", addresses[1:], [{"Status": "ACCOUNT_THROTTLED"}, {"Status": "TRANSIENT_FAILURE"}])
    assert caught.value.answered.refused_temporarily == set(addresses[1:]) and not caught.value.answered.accepted
    with pytest.raises(ProviderRejected) as caught:  # refused for good and for the moment
        SesClient._outcome("batch", addresses[1:], [{"Status": "MESSAGE_REJECTED"}, {"Status": "ACCOUNT_THROTTLED"}])
    assert caught.value.answered.refused_temporarily == {"c@example.com"}
    with pytest.raises(ProviderRateLimited) as caught:
        SesClient._outcome("batch", addresses[:1], [{"Status": "ACCOUNT_DAILY_QUOTA_EXCEEDED"}])
    assert caught.value.answered.retry_after == 3600


async def test_a_header_over_ses_documented_limit_is_refused_before_the_call_by_name():
    from pressroom.providers.port import Message, ProviderRejected
    from pressroom.providers.ses import SesClient

    client = SesClient(endpoint="http://127.0.0.1:9", region="us-east-1", access_key_id="AKIA", secret_access_key="s",
                       domain="ses.example", configuration_set="c")
    try:
        prepared = client.prepare(Message(from_address="news@ses.example", subject="s", html="h", text="t",
                                          headers={"List-Unsubscribe": "<{{recipient.unsubscribe}}>"}))
        with pytest.raises(ProviderRejected, match="header List-Unsubscribe is 1002 characters long") as refused:
            await client.send(prepared, {"reader@example.com": {"unsubscribe": "x" * 1000}}, mark={"b": "1"})
        assert "reader@example.com" not in str(refused.value)
    finally:
        await client.aclose()

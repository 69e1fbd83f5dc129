"""A failed send_batch read one way: its details model, or the positional details and provider-named
types that histories recorded before 0.6.0 hold; renamed payload fields still decode."""

from __future__ import annotations

from datetime import timedelta

import pytest

from activities.newsletter.failures import (
    RecipientLimitDetails,
    RejectedDetails,
    SendFailure,
    SendingLimitDetails,
    UnavailableDetails,
    read_send_failure,
    send_failure,
)
from activities.newsletter.models import SendBatchInput, SendPlan
from pressroom.temporal import data_converter


def round_trip(error) -> SendFailure:
    """Through the data converter, as the workflow receives it."""
    details = data_converter().payload_converter.from_payloads(
        data_converter().payload_converter.to_payloads(list(error.details)))
    return read_send_failure(error.type, details)


@pytest.mark.parametrize("details", [
    RejectedDetails(status_code=400),
    RecipientLimitDetails(status_code=400, refused_size=1000, stated_limit=300),
    RecipientLimitDetails(refused_size=1000),
    SendingLimitDetails(status_code=429, retry_after_seconds=3600.0),
    UnavailableDetails(outage=True),
    UnavailableDetails(status_code=429, outage=True, retry_after_seconds=5.0),
    UnavailableDetails(status_code=503)])
def test_each_kind_carries_one_details_model_that_the_workflow_reads_back(details):
    kind = {RejectedDetails: "ProviderRejected", RecipientLimitDetails: "RecipientLimitExceeded",
            SendingLimitDetails: "SendingLimitReached", UnavailableDetails: "ProviderUnavailable"}[type(details)]
    error = send_failure(kind, "refused", details, next_retry_delay=timedelta(seconds=1))
    assert len(error.details) == 1
    assert round_trip(error) == SendFailure(kind, details.status_code, details)


@pytest.mark.parametrize("error_type, details, expected", [
    ("MailgunRejected", (400,), SendFailure("ProviderRejected", 400, RejectedDetails(status_code=400))),
    ("RecipientLimitExceeded", (400, 1000, 300), SendFailure("RecipientLimitExceeded", 400, RecipientLimitDetails(
        status_code=400, refused_size=1000, stated_limit=300))),
    ("RecipientLimitExceeded", (400, 1000, None), SendFailure("RecipientLimitExceeded", 400, RecipientLimitDetails(
        status_code=400, refused_size=1000))),
    ("RecipientLimitExceeded", (400,), SendFailure("RecipientLimitExceeded", 400, None)),
    ("SendingLimitReached", (429, 3600.0), SendFailure("SendingLimitReached", 429, SendingLimitDetails(
        status_code=429, retry_after_seconds=3600.0))),
    ("SendingLimitReached", (429, None), SendFailure("SendingLimitReached", 429, SendingLimitDetails(
        status_code=429))),
    ("MailgunRateLimited", (429, 5, "mailgun-unreachable"), SendFailure("ProviderRateLimited", 429,
        UnavailableDetails(status_code=429, outage=True, retry_after_seconds=5))),
    ("MailgunUnavailable", (None, "mailgun-unreachable"), SendFailure("ProviderUnavailable", None,
        UnavailableDetails(outage=True))),
    ("MailgunUnavailable", (503,), SendFailure("ProviderUnavailable", 503, UnavailableDetails(status_code=503))),
    ("MailgunBadResponse", (200,), SendFailure("ProviderBadResponse", 200, UnavailableDetails(status_code=200))),
    ("PostNotPublished", (), SendFailure("PostNotPublished", None, None)),
    (None, (), SendFailure(None, None, None)),
], ids=lambda value: repr(value)[:40])
def test_the_positional_details_of_earlier_releases_read_the_same(error_type, details, expected):
    assert read_send_failure(error_type, details) == expected


def test_renamed_payload_fields_decode_from_the_names_histories_hold():
    plan = SendPlan.model_validate({"batch_size": 1000, "concurrency": 2, "mailgun_retries": 6,
                                    "mailgun_retry_seconds": 10.0, "delivery_window_seconds": 0})
    assert (plan.provider_retries, plan.provider_retry_seconds) == (6, 10.0)
    assert "provider_retries" in plan.model_dump() and "mailgun_retries" not in plan.model_dump()
    assert SendBatchInput.model_validate({"batch_id": "b1", "confirm": True}).may_wait_to_confirm is True
    assert SendBatchInput.model_validate({"batch_id": "b1"}).may_wait_to_confirm is False
    assert SendBatchInput(batch_id="b1", may_wait_to_confirm=True).model_dump()["may_wait_to_confirm"] is True

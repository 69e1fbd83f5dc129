"""Why send_batch did not send a batch, in a form the workflow reads one way.

Each kind of failure carries one details model as its ApplicationError's only detail, so that a
field added later shifts nothing. Histories recorded before these models hold positional details
(the status code, then the kind's values, the outage mark last) and provider-named error types:
`read_send_failure` reads those too, so that their runs replay and resume as they were.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio.exceptions import ApplicationError

PROVIDER_REJECTED = "ProviderRejected"  # a 4xx: the same request will be refused again
PROVIDER_RATE_LIMITED = "ProviderRateLimited"  # asked to slow down for less than a minute
PROVIDER_UNAVAILABLE = "ProviderUnavailable"  # not reached, or no answer
PROVIDER_BAD_RESPONSE = "ProviderBadResponse"  # an answer that says nothing certain
PROVIDER_ERROR = "ProviderError"  # any other failure of the provider's
RECIPIENT_LIMIT_EXCEEDED = "RecipientLimitExceeded"  # refused for its size: split it
SENDING_LIMIT_REACHED = "SendingLimitReached"  # the domain's hourly or daily cap: wait for the window
BATCH_NOT_FOUND = "BatchNotFound"
# Error types recorded by earlier releases, and their names now.
STORED_TYPES = {"MailgunRejected": PROVIDER_REJECTED, "MailgunRateLimited": PROVIDER_RATE_LIMITED,
                "MailgunUnavailable": PROVIDER_UNAVAILABLE, "MailgunBadResponse": PROVIDER_BAD_RESPONSE,
                "MailgunError": PROVIDER_ERROR}
# Failures a batch's retry policy does not retry, under either name.
NOT_RETRIED = [PROVIDER_REJECTED, "MailgunRejected", BATCH_NOT_FOUND]
# The last positional detail of an outage in histories recorded before the details models.
STORED_OUTAGE_MARK = "mailgun-unreachable"


class RejectedDetails(BaseModel):
    status_code: int | None = None


class RecipientLimitDetails(BaseModel):
    status_code: int | None = None
    refused_size: int  # recipients in the refused request
    stated_limit: int | None = None  # "Only N recipients per request", when the provider said it


class SendingLimitDetails(BaseModel):
    status_code: int | None = None
    retry_after_seconds: float | None = None  # when the provider said when to come back


class UnavailableDetails(BaseModel):
    """Not sent for a reason that will pass; `outage`: certainly not taken (or asked to slow down),
    so the workflow waits for the provider instead of failing the batch."""

    status_code: int | None = None
    outage: bool = False
    retry_after_seconds: float | None = None


SendFailureDetails = RejectedDetails | RecipientLimitDetails | SendingLimitDetails | UnavailableDetails
DETAILS: dict[str, type[SendFailureDetails]] = {
           PROVIDER_REJECTED: RejectedDetails, RECIPIENT_LIMIT_EXCEEDED: RecipientLimitDetails,
           SENDING_LIMIT_REACHED: SendingLimitDetails, PROVIDER_RATE_LIMITED: UnavailableDetails,
           PROVIDER_UNAVAILABLE: UnavailableDetails, PROVIDER_BAD_RESPONSE: UnavailableDetails,
           PROVIDER_ERROR: UnavailableDetails}


def send_failure(kind: str, message: str, details: SendFailureDetails, *, non_retryable: bool = False,
                 next_retry_delay: timedelta | None = None) -> ApplicationError:
    """The ApplicationError of a failed send: `kind` as its type, `details` as its only detail."""
    return ApplicationError(message, details.model_dump(mode="json"), type=kind, non_retryable=non_retryable,
                            next_retry_delay=next_retry_delay)


@dataclass(frozen=True)
class SendFailure:
    """A failed send as the workflow reads it: its kind under today's name, the provider's status
    code, and the kind's details (None for a failure that is not the provider's: a timeout...)."""

    kind: str | None
    status_code: int | None = None
    details: SendFailureDetails | None = None

    @property
    def outage(self) -> bool:
        return isinstance(self.details, UnavailableDetails) and self.details.outage


def read_send_failure(error_type: str | None, details: tuple[Any, ...] | list[Any]) -> SendFailure:
    """The kind and details of a send_batch failure, from its details model or from the positional
    details of earlier releases. Pure: the workflow calls it."""
    kind = STORED_TYPES.get(error_type, error_type) if error_type else None
    model = DETAILS.get(kind) if kind else None
    if len(details) == 1 and isinstance(details[0], dict) and model is not None:
        parsed = model.model_validate(details[0])
        return SendFailure(kind, parsed.status_code, parsed)
    status = details[0] if details and isinstance(details[0], int) else None
    return SendFailure(kind, status, _from_positions(model, list(details), status))


def _from_positions(model: type[SendFailureDetails] | None, details: list[Any],
                    status: int | None) -> SendFailureDetails | None:
    """Earlier releases' order: status code, then the refused size and stated limit (a size refusal)
    or the seconds to wait (a rate limit), and the outage mark last."""
    def number(n: int) -> int | float | None:
        return details[n] if len(details) > n and isinstance(details[n], (int, float)) else None

    if model is RecipientLimitDetails:
        refused_size = number(1)
        if refused_size is None:
            return None  # nothing to split by: the batch fails as any other
        return RecipientLimitDetails(status_code=status, refused_size=int(refused_size), stated_limit=number(2))
    if model is SendingLimitDetails:
        return SendingLimitDetails(status_code=status, retry_after_seconds=number(1))
    if model is UnavailableDetails:
        return UnavailableDetails(status_code=status, outage=STORED_OUTAGE_MARK in details,
                                  retry_after_seconds=number(1))
    return RejectedDetails(status_code=status) if model is RejectedDetails else None

"""The one place a provider's failure becomes the failure an activity raises to its workflow.

Providers raise the port's neutral errors (pressroom/providers/port.py); sending a batch reads them
as the send workflow's kinds and details models (activities/newsletter/failures.py), every other
activity as the error's neutral type name (`activity_error`), and the outbox's handlers are retried
unless the provider refused the request as it stands (`retried`). No activity names a provider.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.exceptions import ApplicationError

from activities.newsletter.failures import (
    PROVIDER_BAD_RESPONSE,
    PROVIDER_ERROR,
    PROVIDER_RATE_LIMITED,
    PROVIDER_REJECTED,
    PROVIDER_UNAVAILABLE,
    RECIPIENT_LIMIT_EXCEEDED,
    SENDING_LIMIT_REACHED,
    RecipientLimitDetails,
    RejectedDetails,
    SendingLimitDetails,
    UnavailableDetails,
    send_failure,
)
from pressroom.providers.port import (
    NOT_ACCEPTED,
    ProviderBadResponse,
    ProviderError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderUnavailable,
    RecipientLimitExceeded,
    activity_error,
)

__all__ = ["SENDING_LIMIT_SECONDS", "activity_error", "retried", "send_failure_of"]

SENDING_LIMIT_SECONDS = 60  # a provider asking to wait this long or more names its hourly or daily cap


def send_failure_of(error: ProviderError, recipients: int) -> ApplicationError:
    """The provider's refusal or trouble as the workflow reads it: a kind and its details model."""
    if isinstance(error, RecipientLimitExceeded):  # certainly not accepted; the workflow splits the batch
        return send_failure(RECIPIENT_LIMIT_EXCEEDED, str(error), RecipientLimitDetails(
            status_code=error.status_code, refused_size=recipients, stated_limit=error.limit), non_retryable=True)
    if isinstance(error, ProviderRejected):
        return send_failure(PROVIDER_REJECTED, str(error), RejectedDetails(status_code=error.status_code),
                            non_retryable=True)
    if isinstance(error, ProviderRateLimited):
        delay = timedelta(seconds=error.retry_after) if error.retry_after is not None else None
        # A cap's wait is waited out on a workflow timer (SendingLimitReached is not retried).
        if error.retry_after is not None and error.retry_after >= SENDING_LIMIT_SECONDS:
            return send_failure(SENDING_LIMIT_REACHED, str(error), SendingLimitDetails(
                status_code=error.status_code, retry_after_seconds=error.retry_after), next_retry_delay=delay)
        return send_failure(PROVIDER_RATE_LIMITED, str(error), UnavailableDetails(
            status_code=error.status_code, outage=True, retry_after_seconds=error.retry_after), next_retry_delay=delay)
    # Not taken for a reason that will pass (no connection, a request never written) is an outage the
    # workflow waits out once the retries are spent; an uncertain one is not.
    outage = isinstance(error, ProviderUnavailable) and error.outcome == NOT_ACCEPTED
    kind = PROVIDER_UNAVAILABLE if isinstance(error, ProviderUnavailable) else \
        PROVIDER_BAD_RESPONSE if isinstance(error, ProviderBadResponse) else PROVIDER_ERROR
    return send_failure(kind, str(error), UnavailableDetails(status_code=error.status_code, outage=outage))


def retried(error: BaseException) -> bool:
    """Whether a handler's failure is worth another attempt: anything but a provider's refusal."""
    return not isinstance(error, ProviderRejected)

"""Mailgun's answers and failures as the port's neutral errors, in the domain's words.

A 4xx is a refusal (certainly not accepted), a 429 or 420 a rate limit, a refusal for a batch's
size a `RecipientLimitExceeded`; a 5xx, a timeout or a reset after the request was written are
uncertain (Mailgun may have queued it); no connection or a request never fully written is not.
Messages are built here, never from httpx's exceptions, and hold neither the key nor an address.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from pressroom.logs import Mask
from pressroom.providers.port import (
    ProviderBadResponse,
    ProviderError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderUnavailable,
    RecipientLimitExceeded,
)

_MESSAGE_LIMIT = 300  # characters of Mailgun's own explanation kept in our messages
_TRY_AGAIN_AFTER = re.compile(r"try again after (.+?)\s*\.?\s*$", re.IGNORECASE)
_RECIPIENT_LIMIT = re.compile(r"recipient limit|recipients per request|large batches", re.IGNORECASE)
_STATED_LIMIT = re.compile(r"only (\d+) recipients", re.IGNORECASE)
# No connection, or the request was never fully written: Mailgun cannot have queued it.
NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol,
              httpx.WriteError, httpx.WriteTimeout)


def recipient_limit_refusal(status: int, explanation: str, said: str, what: str) -> RecipientLimitExceeded | None:
    """The refusal of a batch for its size (420 "recipient limit exceeded", 403 "not allowed to send
    large batches yet", 400 "Only N recipients per request"), told apart from a rate limit by
    Mailgun's own words; `limit` is N when Mailgun said it."""
    if status not in (400, 403, 420) or not _RECIPIENT_LIMIT.search(explanation):
        return None
    stated = _STATED_LIMIT.search(explanation)
    return RecipientLimitExceeded(f"Mailgun refused the {what} for its size ({status}): {said}", status_code=status,
                                  limit=int(stated.group(1)) if stated else None)


def _one_line(text: str, secrets: Mask) -> str:
    """Mailgun's explanation as one short line without the key or any e-mail address."""
    text = secrets(" ".join(text.split()))
    return text if len(text) <= _MESSAGE_LIMIT else text[:_MESSAGE_LIMIT - 1] + "…"


def _explanation(response: httpx.Response) -> str:
    """Mailgun's `message` field, or its plain-text body (a 401 answers just "Forbidden")."""
    try:
        body = response.json()
    except ValueError:
        return response.text
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    return response.text


def _retry_after(response: httpx.Response, explanation: str, now: datetime) -> float | None:
    """Seconds to wait: from "try again after <date>" in the body, else the Retry-After header."""
    match = _TRY_AGAIN_AFTER.search(explanation)
    candidates = [match.group(1)] if match else []
    candidates.append(response.headers.get("retry-after", ""))
    for value in candidates:
        value = value.strip()
        if not value:
            continue
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            continue
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - now).total_seconds())
    return None



def transport_error(error: httpx.TransportError, base_url: str, what: str) -> ProviderUnavailable:
    """A request that got no answer: not sent when it never left, else perhaps accepted."""
    if isinstance(error, NEVER_SENT):
        return ProviderUnavailable(
            f"Mailgun could not be reached at {base_url}, or the request was cut off before it was "
            f"written ({type(error).__name__}); the {what} was not sent", may_have_been_accepted=False)
    if isinstance(error, httpx.TimeoutException):
        return ProviderUnavailable(
            f"Mailgun did not answer the {what} in time ({type(error).__name__}); it may have been accepted")
    return ProviderUnavailable(f"the connection to Mailgun broke during the {what} ({type(error).__name__}); "
                               "it may have been accepted")


def status_error(response: httpx.Response, what: str, domain: str, secrets: Mask) -> ProviderError:
    """The error a non-2xx answer stands for."""
    status = response.status_code
    explanation = _explanation(response)
    said = _one_line(explanation, secrets)
    if status == 401:
        return ProviderRejected("Mailgun answered 401: the API key was refused (check MAILGUN_API_KEY)",
                                status_code=status)
    if status == 404:
        return ProviderRejected(
            f"Mailgun answered 404 for domain {domain!r}: {said} "
            "(check MAILGUN_DOMAIN, and MAILGUN_BASE_URL for an EU domain)", status_code=status)
    if refusal := recipient_limit_refusal(status, explanation, said, what):
        return refusal
    if status in (420, 429):
        retry_after = _retry_after(response, explanation, datetime.now(UTC))
        wait = f"; retry after {retry_after:.0f} s" if retry_after is not None else ""
        return ProviderRateLimited(f"Mailgun rate-limited the {what} ({status}){wait}: {said}",
                                   status_code=status, retry_after=retry_after)
    if status >= 500:
        return ProviderUnavailable(f"Mailgun failed the {what} ({status}): {said}", status_code=status)
    noun = "message" if what.startswith("batch") else what
    return ProviderRejected(f"Mailgun rejected the {noun} ({status}): {said}", status_code=status)


def not_json(response: httpx.Response, what: str) -> ProviderBadResponse:
    return ProviderBadResponse(
        f"Mailgun answered the {what} with {response.status_code} but a body that is not JSON "
        f"({response.headers.get('content-type', 'no content type')})", status_code=response.status_code)

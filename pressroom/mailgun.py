"""The Mailgun HTTP client: sending batches and reading events, with errors in the domain's words.

Every failure becomes one MailgunError subclass that says whether retrying can help
(`retryable`), how long Mailgun asked us to wait (`retry_after`) and what the attempt's
`outcome` was: certainly not accepted (a 4xx, a 429, a connection never made, a request never
fully written) or uncertain (a 5xx, which Mailgun says may still have sent; a timeout or a reset
after the request was written; a 2xx without an id). Senders persist that outcome and look an
uncertain send up with `find_accepted` before sending it again.

Secrecy: messages are built here, never from httpx's exceptions, and `raise ... from None`
keeps httpx's request (and its Authorization header) out of the chain. Neither the API key nor
a recipient address ever appears in an exception's text.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import re
import secrets
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import format_datetime, parsedate_to_datetime
from typing import TYPE_CHECKING, Any

import httpx
import pydantic
import pydantic_core

from pressroom.logs import Mask
from opentelemetry.trace import SpanKind

from pressroom import tracing
from pressroom.delivery_events import (EVENT_ID_LIMIT, INT32_MAX, MESSAGE_LIMIT, REASON_LIMIT, RECIPIENT_LIMIT,
                                       DeliveryEvent, EventRejected)
from pressroom.settings import MAILGUN_MAX_RECIPIENTS

if TYPE_CHECKING:
    from pressroom.settings import Settings

MAILGUN_MAX_TAGS = 3
MAILGUN_MAX_EVENTS_PAGE = 300
_MESSAGE_LIMIT = 300  # characters of Mailgun's own explanation kept in our messages

# What one send attempt achieved, as senders persist it (email_batches, automated_email_recipients).
ACCEPTED = "accepted"  # a 2xx with a message id
SUPPRESSION_LISTS = ("bounces", "unsubscribes", "complaints")  # Mailgun's per-domain suppression lists
NOT_ACCEPTED = "not_accepted"  # certainly not queued: sending again cannot make a second copy
UNCERTAIN = "uncertain"  # may be queued: look it up before sending again

_TRY_AGAIN_AFTER = re.compile(r"try again after (.+?)\s*\.?\s*$", re.IGNORECASE)


class MailgunError(Exception):
    """Base of every Mailgun failure; `retryable` says whether trying again can help."""

    retryable: bool = False
    may_have_been_accepted: bool = False

    def __init__(self, message: str, *, status_code: int | None = None, retry_after: float | None = None,
                 retryable: bool | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retry_after = retry_after
        if retryable is not None:
            self.retryable = retryable

    @property
    def outcome(self) -> str:
        """UNCERTAIN when the message may be queued at Mailgun all the same, else NOT_ACCEPTED."""
        return UNCERTAIN if self.may_have_been_accepted else NOT_ACCEPTED

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.args[0]!r}, status_code={self.status_code!r})"


class MailgunRejected(MailgunError):
    """Mailgun refused the request as it stands (a 4xx other than a rate limit): do not retry."""

    retryable = False


class TooManyRecipients(MailgunRejected):
    """A batch larger than Mailgun takes; refused before any request is made."""


class RecipientLimitExceeded(MailgunRejected):
    """Mailgun refused the batch for its number of recipients: a new or probation account (420
    "recipient limit exceeded", 403 "not allowed to send large batches yet", 400 "Only N recipients
    per request"). Nothing was accepted; smaller batches will be. `limit` is N when Mailgun said it."""

    def __init__(self, message: str, *, limit: int | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.limit = limit


_RECIPIENT_LIMIT = re.compile(r"recipient limit|recipients per request|large batches", re.IGNORECASE)
_STATED_LIMIT = re.compile(r"only (\d+) recipients", re.IGNORECASE)


def recipient_limit_refusal(status: int, explanation: str, said: str, what: str) -> RecipientLimitExceeded | None:
    """The refusal of a batch for its size, told apart from a rate limit by Mailgun's own words."""
    if status not in (400, 403, 420) or not _RECIPIENT_LIMIT.search(explanation):
        return None
    stated = _STATED_LIMIT.search(explanation)
    return RecipientLimitExceeded(f"Mailgun refused the {what} for its size ({status}): {said}", status_code=status,
                                  limit=int(stated.group(1)) if stated else None)


class MailgunRateLimited(MailgunError):
    """Mailgun asked us to slow down (429, or 420 for a domain's sending limit); `retry_after` in seconds."""

    retryable = True


class MailgunUnavailable(MailgunError):
    """Mailgun failed or could not be reached (5xx, timeouts, dropped connections).

    `may_have_been_accepted` is False only when the request certainly never reached Mailgun
    (it could not connect); otherwise the message may be queued even though we saw no answer.
    """

    retryable = True

    def __init__(self, message: str, *, may_have_been_accepted: bool = True, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.may_have_been_accepted = may_have_been_accepted


class MailgunBadResponse(MailgunError):
    """A 2xx whose body is not what Mailgun documents; a proxy or an outage page, worth retrying.

    A 2xx to a send may mean it was queued: without an id to prove it, the send is uncertain.
    """

    retryable = True
    may_have_been_accepted = True


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
            when = when.replace(tzinfo=timezone.utc)
        return max(0.0, (when - now).total_seconds())
    return None


# multipart/form-data, the format Mailgun documents for sending: each value goes as its UTF-8 bytes
# between boundaries, with nothing to escape (url-encoding a 1,000-recipient batch byte by byte
# dominated a send). The boundary is random per process; a value that holds it is refused.
_BOUNDARY = f"pressroom-{secrets.token_hex(16)}"
_FORM = {"Content-Type": f"multipart/form-data; boundary={_BOUNDARY}"}
_CLOSE = f"--{_BOUNDARY}--\r\n".encode()


def _form_data(fields: Iterable[tuple[str, str]]) -> bytes:
    """Form fields as multipart/form-data parts, to be joined and closed by `_CLOSE`."""
    parts = []
    for name, value in fields:
        if _BOUNDARY in value or '"' in name or "\r" in name or "\n" in name:
            raise MailgunRejected(f"the message's {name.splitlines()[0][:40]!r} field cannot be sent as form data")
        parts.append(f'--{_BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n')
    return "".join(parts).encode("utf-8")


@dataclass(frozen=True)
class MessageFields:
    """What every batch of one message carries alike (sender, subject, bodies, tags, headers,
    tracking), encoded once: a newsletter's batches differ only in recipients and marks."""

    data: bytes


def message_fields(*, from_address: str, subject: str, html: str, text: str, tags: Sequence[str] = (),
                   headers: Mapping[str, str] = {}, tracking_opens: bool | None = None,
                   tracking_clicks: bool | None = None, test_mode: bool = False) -> MessageFields:
    if len(tags) > MAILGUN_MAX_TAGS:
        raise MailgunRejected(f"a message takes at most {MAILGUN_MAX_TAGS} tags, got {len(tags)}")
    fields = [("from", from_address), ("subject", subject), ("html", html), ("text", text),
              *(("o:tag", tag) for tag in tags), *((f"h:{name}", value) for name, value in headers.items())]
    for option, value in (("tracking-opens", tracking_opens), ("tracking-clicks", tracking_clicks),
                          ("testmode", test_mode or None)):
        if value is not None:
            fields.append((f"o:{option}", "yes" if value else "no"))
    return MessageFields(_form_data(fields))


def _rfc2822(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("a Mailgun time must be timezone-aware (use UTC)")
    return format_datetime(moment.astimezone(timezone.utc), usegmt=True)


_URLENCODED = {"Content-Type": "application/x-www-form-urlencoded"}


def _urlencoded(fields: Sequence[tuple[str, str]]) -> bytes:
    from urllib.parse import urlencode

    return urlencode(fields).encode()


def _epoch(moment: datetime) -> str:
    """Epoch seconds, keeping the fraction: analytics resumes from an event's exact timestamp."""
    if moment.tzinfo is None:
        raise ValueError("a Mailgun time must be timezone-aware (use UTC)")
    return f"{moment.timestamp():.6f}".rstrip("0").rstrip(".")


def _event_message_id(event: dict) -> str:
    """The Message-Id an event reports for its message, without <>; "" when it has none."""
    message = event.get("message")
    headers = message.get("headers") if isinstance(message, dict) else None
    value = headers.get("message-id") if isinstance(headers, dict) else None
    return value.strip().strip("<>") if isinstance(value, str) else ""


def _span_path(url: str) -> str:
    """A request's path for its span, without the query string, and with a paging link's token
    (opaque, but it encodes the query, a recipient's address among it) as `{page}`."""
    head, paging, _ = httpx.URL(url).path.partition("/events/")
    return f"{head}/events/{{page}}" if paging else head


# --- events, as DeliveryEvents ------------------------------------------------------------------

PROVIDER = "mailgun"
_KINDS = {"accepted": "accepted", "delivered": "delivered", "opened": "opened", "clicked": "clicked",
          "unsubscribed": "unsubscribed", "complained": "complained"}
_EARLIEST, _LATEST = 946684800.0, 4102444800.0  # 2000-01-01 and 2100-01-01: any other time is not an event's
_VARIABLES_BUDGET = 200  # values in an event's user-variables, nested ones included: ours are two strings
_VARIABLES_DEPTH = 5
_VARIABLE_LIMIT = 4096  # characters of one user variable
_CONTROL = re.compile(r"[\x01-\x08\x0b\x0c\x0e-\x1f\x7f]")
_UNUSABLE = re.compile(r"[\x00\ud800-\udfff]")  # a NUL or half a surrogate pair: PostgreSQL cannot store either


class _Refused(Exception):
    """Why an event cannot be applied; the text is one line without an address."""


def _identifier(value: Any, name: str, limit: int, required: bool = True) -> str | None:
    """A printable string of at most `limit` characters, without surrounding spaces."""
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise _Refused(f"{name} is {'missing' if value is None else 'not a string'}")
    value = value.strip()
    if not value:
        if required:
            raise _Refused(f"{name} is empty")
        return None
    if len(value) > limit:
        raise _Refused(f"{name} is longer than {limit} characters")
    if not value.isprintable():
        raise _Refused(f"{name} holds a control or invisible character")
    return value


def _free_text(value: Any, name: str, limit: int) -> str | None:
    """Text a person reads (a failure's explanation): control characters become spaces, cut at `limit`."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Refused(f"{name} is not a string")
    if _UNUSABLE.search(value):
        raise _Refused(f"{name} holds a NUL byte or an unpaired surrogate")
    value = _CONTROL.sub(" ", value).strip()
    return value[:limit] or None


def _bounded(value: Any, name: str) -> None:
    """User variables are small: a few levels and a few hundred values at most."""
    budget = _VARIABLES_BUDGET
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        budget -= 1
        if budget < 0 or depth > _VARIABLES_DEPTH:
            raise _Refused(f"{name} is nested too deep or holds too many values")
        if isinstance(node, dict):
            stack.extend((item, depth + 1) for pair in node.items() for item in pair)
        elif isinstance(node, list):
            stack.extend((item, depth + 1) for item in node)
        elif isinstance(node, str) and len(node) > _VARIABLE_LIMIT:
            raise _Refused(f"{name} holds a value longer than {_VARIABLE_LIMIT} characters")


def _code(status: dict) -> int | None:
    code = status.get("code")
    if code is None:
        return None
    if isinstance(code, str) and code.strip().isdigit() and len(code.strip()) <= 10:
        code = int(code)
    if not isinstance(code, int) or isinstance(code, bool):
        raise _Refused("delivery-status.code is not an integer")
    if not 0 <= code <= INT32_MAX:
        raise _Refused("delivery-status.code is beyond a 32-bit integer")
    return code


def parse_event(item: Any) -> DeliveryEvent | EventRejected:
    """One Mailgun event (an events API item, or a webhook's `event-data`: the same fields) as a
    DeliveryEvent, or the one-line reason it cannot be one. Never raises."""
    event_id = None
    try:
        if not isinstance(item, dict):
            raise _Refused("the event is not a JSON object")
        event_id = _identifier(item.get("id"), "id", EVENT_ID_LIMIT)
        name = _identifier(item.get("event"), "event", 50)
        stamp = item.get("timestamp")
        if not isinstance(stamp, (int, float)) or isinstance(stamp, bool) or not _EARLIEST <= stamp <= _LATEST:
            raise _Refused("timestamp is missing or not a time between 2000 and 2100")
        recipient = _identifier(item.get("recipient"), "recipient", RECIPIENT_LIMIT)
        variables = item.get("user-variables")
        if variables is None:
            variables = {}
        elif not isinstance(variables, dict):
            raise _Refused("user-variables is not an object")
        elif len(variables) > 8 or not all(isinstance(v, str) and len(v) <= _VARIABLE_LIMIT
                                           for v in variables.values()):
            _bounded(variables, "user-variables")  # the common case, a few short strings, needs no walk
        email_id = _identifier(variables.get("email-id"), "user-variables.email-id", 100, required=False)
        batch_id = _identifier(variables.get("pressroom-batch"), "user-variables.pressroom-batch", 100,
                               required=False)
        message = item.get("message")
        headers = message.get("headers") if isinstance(message, dict) else None
        provider_id = _identifier(headers.get("message-id") if isinstance(headers, dict) else None,
                                  "message.headers.message-id", 998, required=False)
        provider_id = provider_id.strip("<> ") or None if provider_id else None
        if email_id is None and provider_id is None:
            raise _Refused("the event names neither an email (user-variables.email-id) nor a message id")
        fields: dict[str, Any] = {}
        if name == "failed":
            severity = "permanent" if item.get("severity") == "permanent" else "temporary"
            status = item.get("delivery-status")
            if status is not None and not isinstance(status, dict):
                raise _Refused("delivery-status is not an object")
            status = status or {}
            explanation = _free_text(status.get("message"), "delivery-status.message", MESSAGE_LIMIT) \
                or _free_text(status.get("description"), "delivery-status.description", MESSAGE_LIMIT)
            fields = {"kind": f"failed-{severity}", "severity": severity, "code": _code(status),
                      "enhanced_code": _identifier(status.get("enhanced-code"), "delivery-status.enhanced-code", 50,
                                                   required=False),
                      "message": explanation,
                      "reason": _free_text(item.get("reason"), "reason", REASON_LIMIT)}
        else:
            fields = {"kind": _KINDS.get(name, "other")}
    except _Refused as refusal:
        return EventRejected(provider=PROVIDER, reason=str(refusal), event_id=event_id)
    except (RecursionError, MemoryError):
        return EventRejected(provider=PROVIDER, reason="the event is too large or nested too deep", event_id=event_id)
    try:
        return DeliveryEvent(provider=PROVIDER, event_id=event_id, name=name, timestamp=float(stamp),
                             recipient=recipient, email_id=email_id, batch_id=batch_id,
                             provider_message_id=provider_id, **fields)
    except pydantic.ValidationError as error:  # checked above already: a second net, never expected to catch
        return EventRejected(provider=PROVIDER, reason=f"the event does not fit its model ({error.error_count()} errors)",
                             event_id=event_id)


# --- webhooks ------------------------------------------------------------------------------------

# The webhook kinds Pressroom registers: every one whose events it applies (clicks it does not).
WEBHOOK_KINDS = ("delivered", "opened", "permanent_fail", "temporary_fail", "unsubscribed", "complained")
_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")
_SIGNATURE = re.compile(r"[0-9a-f]{64}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")


def webhook_signature(signing_key: str, timestamp: str, token: str) -> str:
    """Mailgun's signature of a webhook request: HMAC-SHA256 of timestamp + token, in hex."""
    return hmac.new(signing_key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class WebhookSignature:
    timestamp: int
    token: str


def verify_webhook(signing_key: str, body: Any, now: float, max_age: float) -> WebhookSignature:
    """The request's signature checked (compared in constant time) and fresh: its timestamp and token.

    Raises ValueError with the reason to refuse it (one line: "signature does not match", …)."""
    signature = body.get("signature") if isinstance(body, dict) else None
    if not isinstance(signature, dict) or not isinstance(body.get("event-data"), dict):
        raise ValueError("no signature or no event-data")
    timestamp, token, given = signature.get("timestamp"), signature.get("token"), signature.get("signature")
    timestamp = str(timestamp) if isinstance(timestamp, int) and not isinstance(timestamp, bool) else timestamp
    if not (isinstance(timestamp, str) and _TIMESTAMP.fullmatch(timestamp) and isinstance(token, str)
            and _TOKEN.fullmatch(token) and isinstance(given, str) and _SIGNATURE.fullmatch(given.lower())):
        raise ValueError("signature fields malformed")
    if not hmac.compare_digest(webhook_signature(signing_key, timestamp, token), given.lower()):
        raise ValueError("signature does not match")
    if abs(now - int(timestamp)) > max_age:
        raise ValueError("timestamp stale")
    return WebhookSignature(int(timestamp), token)


class MailgunClient:
    """One connection pool to one Mailgun domain; build once per worker, close on shutdown."""

    def __init__(self, *, base_url: str, api_key: str, domain: str, timeout: float = 30.0,
                 max_connections: int = 20, transport: httpx.AsyncBaseTransport | None = None) -> None:
        """`transport` is for tests (httpx.MockTransport); production uses httpx's own."""
        self.base_url = base_url.rstrip("/")
        self.domain = domain
        # What must never be echoed back: the key, raw or encoded (the Authorization header), and addresses.
        self._secrets = Mask([api_key])
        self._origin = httpx.URL(self.base_url)
        self._http = httpx.AsyncClient(
            base_url=self.base_url, auth=httpx.BasicAuth("api", api_key),
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            headers={"Accept": "application/json"}, transport=transport)

    @classmethod
    def from_settings(cls, settings: Settings) -> MailgunClient:
        settings.require_mailgun()
        return cls(base_url=settings.mailgun_base_url, api_key=settings.mailgun_api_key.get_secret_value(),
                   domain=settings.mailgun_domain, timeout=settings.mailgun_timeout_seconds)

    def __repr__(self) -> str:
        return f"MailgunClient(base_url={self.base_url!r}, domain={self.domain!r})"

    def for_domain(self, domain: str) -> MailgunClient:
        """A client for another domain of the same account (domain warming's fallback), sharing this
        client's connections; close only the original."""
        if domain == self.domain:
            return self
        sibling = copy.copy(self)
        sibling.domain = domain
        return sibling

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> MailgunClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- suppressions ---

    async def remove_suppressions(self, address: str) -> list[str]:
        """Delete the address from this domain's bounces, unsubscribes and complaints lists; the lists
        it was on (a 404 means it was not on that one). Safe to repeat."""
        from urllib.parse import quote

        removed = []
        for table in SUPPRESSION_LISTS:
            try:
                await self._request("DELETE", f"/v3/{self.domain}/{table}/{quote(address, safe='@')}",
                                    what=f"removal from the {table} list")
            except MailgunRejected as error:
                if error.status_code == 404 and "address not found" in str(error).lower():
                    continue  # not on this list (an unknown domain is a 404 too, and is raised)
                raise
            removed.append(table)
        return removed

    # --- sending ---

    async def send_batch(self, *, from_address: str, to: list[str], subject: str, html: str, text: str,
                         recipient_variables: dict[str, dict[str, str]], tags: Sequence[str] = (),
                         variables: Mapping[str, str] = {}, headers: Mapping[str, str] = {},
                         delivery_time: datetime | None = None, tracking_opens: bool | None = None,
                         tracking_clicks: bool | None = None, test_mode: bool = False) -> str:
        """Queue one message for a batch of recipients; returns Mailgun's message id without <>."""
        fields = message_fields(from_address=from_address, subject=subject, html=html, text=text, tags=tags,
                                headers=headers, tracking_opens=tracking_opens, tracking_clicks=tracking_clicks,
                                test_mode=test_mode)
        return await self.send_fields(fields, to=to, recipient_variables=recipient_variables, variables=variables,
                                      delivery_time=delivery_time)

    async def send_fields(self, fields: MessageFields, *, to: list[str],
                          recipient_variables: dict[str, dict[str, str]], variables: Mapping[str, str] = {},
                          headers: Mapping[str, str] = {}, delivery_time: datetime | None = None) -> str:
        """`send_batch` with the shared fields encoded beforehand (`message_fields`); `variables`
        (v:) and `headers` (h:) here are this batch's own."""
        what = f"batch of {len(to)} recipients"
        if len(to) > MAILGUN_MAX_RECIPIENTS:
            raise TooManyRecipients(f"a {what} exceeds Mailgun's limit of {MAILGUN_MAX_RECIPIENTS} per message")
        if not to:
            raise MailgunRejected("a batch needs at least one recipient")
        # pydantic's JSON encoder (in Rust) writes a batch's variables several times faster than json.dumps.
        # One `to` field, addresses separated by commas (as Mailgun documents): a thousand form
        # parts cost a multipart parser far more than one. Member addresses are bare and
        # validated, so none holds a comma.
        if any("," in address for address in to):
            raise MailgunRejected("a recipient address holds a comma, which Mailgun would read as two addresses")
        own = [("to", ",".join(to)),
               ("recipient-variables", pydantic_core.to_json(recipient_variables).decode()),
               *((f"v:{name}", value) for name, value in variables.items()),
               *((f"h:{name}", value) for name, value in headers.items())]
        if delivery_time is not None:
            own.append(("o:deliverytime", _rfc2822(delivery_time)))
        response = await self._request("POST", f"/v3/{self.domain}/messages", what=what,
                                       content=b"".join((fields.data, _form_data(own), _CLOSE)), headers=_FORM)
        body = self._json(response, what)
        message_id = body.get("id") if isinstance(body, dict) else None
        if not isinstance(message_id, str) or not message_id.strip("<> "):
            raise MailgunBadResponse(f"Mailgun accepted the {what} but its answer carries no message id")
        return message_id.strip().strip("<>")

    # --- events ---

    def events(self, *, begin: datetime, end: datetime | None = None, ascending: bool = True,
               limit: int = MAILGUN_MAX_EVENTS_PAGE, event: str | None = None) -> AsyncIterator[list[dict]]:
        """Every page of events in the range, following `paging.next` until an empty page."""
        return self._walk(begin=begin, end=end, ascending=ascending, limit=limit, event=event)

    async def _walk(self, **query: Any) -> AsyncIterator[list[dict]]:
        url: str | None = None
        while True:
            items, url = await self.events_page(url, **query)
            if not items:
                return
            yield items
            if url is None:
                return

    async def events_page(self, url_or_none: str | None, *, begin: datetime | None = None,
                          end: datetime | None = None, ascending: bool = True,
                          limit: int = MAILGUN_MAX_EVENTS_PAGE, event: str | None = None,
                          message_id: str | None = None, recipient: str | None = None, tags: str | None = None,
                          ) -> tuple[list[dict], str | None]:
        """One page and the next page's URL; a saved URL resumes where a previous attempt stopped."""
        what = "events query"
        if url_or_none is None:
            if begin is None:
                raise ValueError("an events query needs `begin` (or a saved page URL)")
            if not 1 <= limit <= MAILGUN_MAX_EVENTS_PAGE:
                raise ValueError(f"Mailgun returns at most {MAILGUN_MAX_EVENTS_PAGE} events per page, "
                                 f"asked for {limit}")
            params = {"begin": _epoch(begin), "ascending": "yes" if ascending else "no", "limit": str(limit)}
            if end is not None:
                params["end"] = _epoch(end)
            if event:
                params["event"] = event
            if message_id:
                params["message-id"] = message_id
            if recipient:
                params["recipient"] = recipient
            if tags:
                params["tags"] = tags
            response = await self._request("GET", f"/v3/{self.domain}/events", what=what, params=params)
        else:
            self._check_same_origin(url_or_none)
            response = await self._request("GET", url_or_none, what=what)

        body = self._json(response, what)
        items = body.get("items") if isinstance(body, dict) else None
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise MailgunBadResponse("Mailgun answered the events query without a list of `items`")
        paging = body.get("paging")
        next_url = paging.get("next") if isinstance(paging, dict) else None
        if next_url is not None and not isinstance(next_url, str):
            raise MailgunBadResponse("Mailgun answered the events query with a malformed `paging.next`")
        if next_url:
            self._check_same_origin(next_url)
        return items, next_url or None

    async def find_accepted(self, *, recipient: str, variables: Mapping[str, str], begin: datetime,
                            end: datetime, message_id: str | None = None) -> str | None:
        """The Mailgun id of the message that proves an uncertain send was accepted, or None.

        Asks with filters Mailgun documents (`event=accepted`, the message's first `recipient`, a
        time window, oldest first) and pages to the end, but trusts only the events' own fields:
        a provider may ignore a filter or assign its own Message-Id, so an event counts only when
        its user-variables carry every one of `variables` (a `v:` mark of the send's own), or when
        it carries the custom `message_id` the send set. "None" means "not visible yet", not "not
        accepted": events may appear up to about 30 minutes late.
        """
        wanted_recipient = recipient.casefold()
        url: str | None = None
        while True:
            if url is None:
                items, url = await self.events_page(None, begin=begin, end=end, ascending=True,
                                                    event="accepted", recipient=recipient)
            else:
                items, url = await self.events_page(url)
            for item in items:
                if item.get("event") != "accepted" or str(item.get("recipient", "")).casefold() != wanted_recipient:
                    continue
                found = _event_message_id(item)
                marks = item.get("user-variables")
                marked = isinstance(marks, dict) and all(marks.get(k) == v for k, v in variables.items())
                if marked or (message_id is not None and found == message_id):
                    return found or message_id or ""
            if not items or url is None:
                return None

    # --- webhooks ---

    async def webhooks(self) -> dict[str, list[str]]:
        """The domain's webhooks: kind → its URLs."""
        response = await self._request("GET", f"/v3/domains/{self.domain}/webhooks", what="webhooks query")
        body = self._json(response, "webhooks query")
        hooks = body.get("webhooks") if isinstance(body, dict) else None
        if not isinstance(hooks, dict):
            raise MailgunBadResponse("Mailgun answered the webhooks query without `webhooks`")
        return {kind: [u for u in (value or {}).get("urls", []) if isinstance(u, str)]
                for kind, value in hooks.items() if isinstance(value, dict) or value is None}

    async def set_webhook(self, kind: str, urls: Sequence[str], *, exists: bool) -> None:
        """Create the kind's webhook with these URLs, or replace the URLs of an existing one."""
        form = [("url", url) for url in urls]
        if exists:
            await self._request("PUT", f"/v3/domains/{self.domain}/webhooks/{kind}", what=f"{kind} webhook update",
                                content=_urlencoded(form), headers=_URLENCODED)
        else:
            await self._request("POST", f"/v3/domains/{self.domain}/webhooks", what=f"{kind} webhook creation",
                                content=_urlencoded([("id", kind), *form]), headers=_URLENCODED)

    def _check_same_origin(self, url: str) -> None:
        """A paging URL must point at our Mailgun: the API key is sent with it."""
        target = httpx.URL(url)
        if (target.scheme, target.host, target.port) != (self._origin.scheme, self._origin.host, self._origin.port):
            raise MailgunBadResponse(f"a Mailgun paging link points outside {self.base_url}; refusing to follow it")

    # --- HTTP and errors ---

    async def _request(self, method: str, url: str, *, what: str, **kwargs: Any) -> httpx.Response:
        try:
            with tracing.span(f"Mailgun {method}", {"http.request.method": method, "url.path": _span_path(url),
                                                    "server.address": self._origin.host, "mailgun.request": what},
                              kind=SpanKind.CLIENT) as span:
                response = await self._http.request(method, url, **kwargs)
                span.set_attribute("http.response.status_code", response.status_code)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol,
                httpx.WriteError, httpx.WriteTimeout) as error:
            # No connection, or the request was never fully written: Mailgun cannot have queued it.
            raise MailgunUnavailable(
                f"Mailgun could not be reached at {self.base_url}, or the request was cut off before it was "
                f"written ({type(error).__name__}); the {what} was not sent", may_have_been_accepted=False) from None
        except httpx.TimeoutException as error:
            raise MailgunUnavailable(
                f"Mailgun did not answer the {what} in time ({type(error).__name__}); it may have been accepted",
                may_have_been_accepted=True) from None
        except httpx.TransportError as error:
            raise MailgunUnavailable(
                f"the connection to Mailgun broke during the {what} ({type(error).__name__}); "
                "it may have been accepted", may_have_been_accepted=True) from None
        if response.is_success:
            return response
        raise self._status_error(response, what)

    def _status_error(self, response: httpx.Response, what: str) -> MailgunError:
        status = response.status_code
        explanation = _explanation(response)
        said = _one_line(explanation, self._secrets)
        if status == 401:
            return MailgunRejected("Mailgun answered 401: the API key was refused (check MAILGUN_API_KEY)",
                                   status_code=status)
        if status == 404:
            return MailgunRejected(
                f"Mailgun answered 404 for domain {self.domain!r}: {said} "
                "(check MAILGUN_DOMAIN, and MAILGUN_BASE_URL for an EU domain)", status_code=status)
        if refusal := recipient_limit_refusal(status, explanation, said, what):
            return refusal
        if status in (420, 429):
            retry_after = _retry_after(response, explanation, datetime.now(timezone.utc))
            wait = f"; retry after {retry_after:.0f} s" if retry_after is not None else ""
            return MailgunRateLimited(f"Mailgun rate-limited the {what} ({status}){wait}: {said}",
                                      status_code=status, retry_after=retry_after)
        if status >= 500:
            return MailgunUnavailable(f"Mailgun failed the {what} ({status}): {said}", status_code=status,
                                      may_have_been_accepted=True)
        noun = "message" if what.startswith("batch") else what
        return MailgunRejected(f"Mailgun rejected the {noun} ({status}): {said}", status_code=status)

    @staticmethod
    def _json(response: httpx.Response, what: str) -> Any:
        try:
            return response.json()
        except ValueError:
            raise MailgunBadResponse(
                f"Mailgun answered the {what} with {response.status_code} but a body that is not JSON "
                f"({response.headers.get('content-type', 'no content type')})", status_code=response.status_code,
            ) from None

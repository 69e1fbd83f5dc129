"""The Mailgun HTTP client: one implementation of the email provider port (pressroom.providers.port).

Every failure is one of the port's neutral errors (errors.py says which answer is which), with the
attempt's outcome: certainly not accepted, or uncertain, looked up with `find_accepted` before the
send is made again. Secrecy: `raise ... from None` keeps httpx's request (and its Authorization
header) out of the chain; neither the API key nor a recipient address appears in an error's text.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import httpx
import pydantic_core
from opentelemetry.trace import SpanKind

from pressroom import tracing
from pressroom.delivery_events import DeliveryEvent, EventRejected
from pressroom.logs import Mask
from pressroom.providers.mailgun.errors import not_json, status_error, transport_error
from pressroom.providers.mailgun.events import PROVIDER, event_message_id, parse_event
from pressroom.providers.mailgun.template import mailgun_template
from pressroom.providers.mailgun.webhooks import WEBHOOK_KINDS
from pressroom.providers.port import (
    CONFIRM_BY_QUERY,
    AccountQuota,
    Capabilities,
    DomainScopedClient,
    EventQuery,
    EventsPage,
    Message,
    PreparedMessage,
    ProviderBadResponse,
    ProviderLimits,
    ProviderRejected,
    SenderState,
    SendResult,
    TooManyRecipients,
)
from pressroom.settings import MAILGUN_MAX_RECIPIENTS

if TYPE_CHECKING:
    from pressroom.settings import Settings

MAILGUN_MAX_TAGS = 3
MAILGUN_MAX_EVENTS_PAGE = 300
SUPPRESSION_LISTS = ("bounces", "unsubscribes", "complaints")  # Mailgun's per-domain suppression lists
LIMITS = ProviderLimits(max_recipients=MAILGUN_MAX_RECIPIENTS, max_tags=MAILGUN_MAX_TAGS,
                        max_events_page=MAILGUN_MAX_EVENTS_PAGE)
CAPABILITIES = Capabilities(confirms_by=CONFIRM_BY_QUERY, polls_events=True)

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
            raise ProviderRejected(f"the message's {name.splitlines()[0][:40]!r} field cannot be sent as form data")
        parts.append(f'--{_BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n')
    return "".join(parts).encode("utf-8")



@dataclass(frozen=True)
class MessageFields:
    """What every batch of one message carries alike (sender, subject, bodies, tags, headers,
    tracking), encoded once: a newsletter's batches differ only in recipients and marks."""

    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)


def message_fields(*, from_address: str, subject: str, html: str, text: str, tags: Sequence[str] = (),
                   headers: Mapping[str, str] = {}, tracking_opens: bool | None = None,
                   tracking_clicks: bool | None = None, test_mode: bool = False) -> MessageFields:
    """The shared fields, the port's placeholders in Mailgun's syntax, as form data."""
    if len(tags) > MAILGUN_MAX_TAGS:
        raise ProviderRejected(f"a message takes at most {MAILGUN_MAX_TAGS} tags, got {len(tags)}")
    fields = [("from", from_address), ("subject", mailgun_template(subject)), ("html", mailgun_template(html)),
              ("text", mailgun_template(text)), *(("o:tag", tag) for tag in tags),
              *((f"h:{name}", mailgun_template(value)) for name, value in headers.items())]
    for option, value in (("tracking-opens", tracking_opens), ("tracking-clicks", tracking_clicks),
                          ("testmode", test_mode or None)):
        if value is not None:
            fields.append((f"o:{option}", "yes" if value else "no"))
    return MessageFields(_form_data(fields))


def _rfc2822(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("a Mailgun time must be timezone-aware (use UTC)")
    return format_datetime(moment.astimezone(UTC), usegmt=True)


_URLENCODED = {"Content-Type": "application/x-www-form-urlencoded"}


def _urlencoded(fields: Sequence[tuple[str, str]]) -> bytes:

    return urlencode(fields).encode()


def _epoch(moment: datetime) -> str:
    """Epoch seconds, keeping the fraction: analytics resumes from an event's exact timestamp."""
    if moment.tzinfo is None:
        raise ValueError("a Mailgun time must be timezone-aware (use UTC)")
    return f"{moment.timestamp():.6f}".rstrip("0").rstrip(".")


def _span_path(url: str) -> str:
    """A request's path for its span, without the query string, with a paging link's token
    (opaque, but it encodes the query, a recipient's address among it) as `{page}`, and a
    suppression's address (`/v3/{domain}/bounces/{address}`) as `{address}`: spans carry ids."""
    path = httpx.URL(url).path
    head, paging, _ = path.partition("/events/")
    if paging:
        return f"{head}/events/{{page}}"
    parts = path.split("/")
    if len(parts) >= 5 and parts[3] in SUPPRESSION_LISTS:
        return "/".join([*parts[:4], "{address}"])
    return path



class MailgunClient(DomainScopedClient):
    """One connection pool to one Mailgun domain; build once per worker, close on shutdown.

    The port's `EmailProvider`: its scope is the sending domain."""

    name = PROVIDER
    title = "Mailgun"
    limits = LIMITS
    capabilities = CAPABILITIES

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

    def parse_event(self, item: Any) -> DeliveryEvent | EventRejected:
        return parse_event(item)

    # --- suppressions ---

    async def remove_suppressions(self, address: str) -> list[str]:
        """Delete the address from this domain's bounces, unsubscribes and complaints lists; the lists
        it was on (a 404 means it was not on that one). Safe to repeat."""

        removed = []
        for table in SUPPRESSION_LISTS:
            try:
                await self._request("DELETE", f"/v3/{self.domain}/{table}/{quote(address, safe='@')}",
                                    what=f"removal from the {table} list")
            except ProviderRejected as error:
                if error.status_code == 404 and "address not found" in str(error).lower():
                    continue  # not on this list (an unknown domain is a 404 too, and is raised)
                raise
            removed.append(table)
        return removed

    # --- sending ---

    def prepare(self, message: Message) -> MessageFields:
        """The message's shared fields, its placeholders in Mailgun's syntax, encoded once."""
        return message_fields(
            from_address=message.from_address, subject=message.subject, html=message.html, text=message.text,
            tags=message.tags, headers=message.headers, tracking_opens=message.tracking_opens,
            tracking_clicks=message.tracking_clicks, test_mode=message.test_mode)

    async def send(self, message: PreparedMessage, recipients: Mapping[str, Mapping[str, str]], *,
                   mark: Mapping[str, str], message_id: str | None = None, headers: Mapping[str, str] = {},
                   delivery_time: datetime | None = None) -> SendResult:
        """The port's send: `mark` as `v:` variables, `message_id` as the Message-Id header; one
        message, so every recipient shares its id."""
        assert isinstance(message, MessageFields)  # what this provider's prepare() made
        own_headers = {**({"Message-Id": f"<{message_id}>"} if message_id else {}), **headers}
        # Copied only when not a dict already (the JSON encoder takes dicts): a send's are.
        variables = {address: values if type(values) is dict else dict(values)
                     for address, values in recipients.items()}
        provider_id = await self.send_fields(message, to=list(recipients), recipient_variables=variables,
                                      variables=mark, headers=own_headers, delivery_time=delivery_time)
        return SendResult.whole(provider_id, list(recipients))

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
            raise ProviderRejected("a batch needs at least one recipient")
        # pydantic's JSON encoder (in Rust) writes a batch's variables several times faster than json.dumps.
        # One `to` field, addresses separated by commas (as Mailgun documents): a thousand form
        # parts cost a multipart parser far more than one. Member addresses are bare and
        # validated, so none holds a comma.
        if any("," in address for address in to):
            raise ProviderRejected("a recipient address holds a comma, which Mailgun would read as two addresses")
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
            raise ProviderBadResponse(f"Mailgun accepted the {what} but its answer carries no message id")
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
            raise ProviderBadResponse("Mailgun answered the events query without a list of `items`")
        paging = body.get("paging")
        next_url = paging.get("next") if isinstance(paging, dict) else None
        if next_url is not None and not isinstance(next_url, str):
            raise ProviderBadResponse("Mailgun answered the events query with a malformed `paging.next`")
        if next_url:
            self._check_same_origin(next_url)
        return items, next_url or None

    async def find_accepted_each(self, *, recipients: Sequence[str], mark: Mapping[str, str], begin: datetime,
                                 end: datetime) -> Mapping[str, str] | None:
        return None  # a message is accepted for all its recipients or for none

    async def check_account(self) -> str:
        """A one-event query of the last five minutes: the key and the domain answer."""
        await self.read_events(None, EventQuery(begin=datetime.now(UTC) - timedelta(minutes=5), limit=1))
        return f"{self.base_url} domain {self.domain}"

    async def sender_state(self, from_address: str) -> SenderState:
        """Mailgun sends from the account's domain whatever the From: that domain's state and its
        sending DNS records (SPF, DKIM) as Mailgun verified them (GET /v4/domains/{domain})."""
        try:
            response = await self._request("GET", f"/v4/domains/{self.domain}", what="domain query")
        except ProviderRejected as error:
            if error.status_code == 404:
                return SenderState(self.domain, False, "not a domain of this Mailgun account")
            raise
        body = self._json(response, "domain query")
        domain = body.get("domain") if isinstance(body, dict) else None
        state = domain.get("state") if isinstance(domain, dict) else None
        if not isinstance(state, str):
            raise ProviderBadResponse("Mailgun answered the domain query without the domain's `state`")
        records = body.get("sending_dns_records")
        checks = []
        for record in records if isinstance(records, list) else []:
            if not isinstance(record, dict):
                continue
            value, name = str(record.get("value", "")), str(record.get("name", ""))
            kind = "SPF" if value.startswith("v=spf1") else "DKIM" if "domainkey" in name else None
            if kind:
                checks.append(f"{kind} {record.get('valid', 'unknown')}")
        detail = f"domain {self.domain} {state}" + (f" ({', '.join(checks)})" if checks else "")
        return SenderState(self.domain, state == "active", detail[:300])

    async def account_quota(self, at: datetime | None = None) -> AccountQuota:
        """Mailgun states none: its plan's caps are configured (PRESSROOM_HOURLY/DAILY_SEND_LIMIT)."""
        return AccountQuota()

    async def read_events(self, page: str | None, query: EventQuery) -> EventsPage:
        """The port's page of events: names joined with OR, tags with AND (Mailgun's filter syntax)."""
        if page is None:
            items, next_page = await self.events_page(
                None, begin=query.begin, end=query.end, ascending=True, limit=query.limit,
                event=" OR ".join(query.names) or None, tags=" AND ".join(query.tags) or None)
        else:
            items, next_page = await self.events_page(page)
        stamp = items[-1].get("timestamp") if items else None
        return EventsPage(items=items, next_page=next_page,
                          last_timestamp=stamp if isinstance(stamp, (int, float)) and not isinstance(stamp, bool)
                          else None)

    async def find_accepted(self, *, recipient: str, mark: Mapping[str, str], begin: datetime, end: datetime,
                            message_id: str | None = None) -> str | None:
        """The Mailgun id of the message that proves an uncertain send was accepted, or None.

        Asks with filters Mailgun documents (`event=accepted`, the message's first `recipient`, a
        time window, oldest first) and pages to the end, but trusts only the events' own fields:
        a provider may ignore a filter or assign its own Message-Id, so an event counts only when
        its user-variables carry every item of `mark` (the `v:` variables of the send's own), or when
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
                found = event_message_id(item)
                marks = item.get("user-variables")
                marked = isinstance(marks, dict) and all(marks.get(k) == v for k, v in mark.items())
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
            raise ProviderBadResponse("Mailgun answered the webhooks query without `webhooks`")
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

    async def register_push(self, url: str) -> dict[str, str]:
        """Every kind Pressroom applies pushed to `url` too; Mailgun keeps up to three URLs a kind,
        so another receiver's stays registered."""
        current = await self.webhooks()
        outcome = {}
        for kind in WEBHOOK_KINDS:
            urls = current.get(kind) or []
            if url in urls:
                outcome[kind] = "unchanged"
                continue
            await self.set_webhook(kind, [*urls, url], exists=kind in current and bool(urls))
            outcome[kind] = "added" if urls else "created"
        return outcome

    def _check_same_origin(self, url: str) -> None:
        """A paging URL must point at our Mailgun: the API key is sent with it."""
        target = httpx.URL(url)
        if (target.scheme, target.host, target.port) != (self._origin.scheme, self._origin.host, self._origin.port):
            raise ProviderBadResponse(f"a Mailgun paging link points outside {self.base_url}; refusing to follow it")

    # --- HTTP and errors ---

    async def _request(self, method: str, url: str, *, what: str, **kwargs: Any) -> httpx.Response:
        try:
            with tracing.span(f"Mailgun {method}", {"http.request.method": method, "url.path": _span_path(url),
                                                    "server.address": self._origin.host, "mailgun.request": what},
                              kind=SpanKind.CLIENT) as span:
                response = await self._http.request(method, url, **kwargs)
                span.set_attribute("http.response.status_code", response.status_code)
        except httpx.TransportError as error:
            raise transport_error(error, self.base_url, what) from None
        if response.is_success:
            return response
        raise status_error(response, what, self.domain, self._secrets)

    @staticmethod
    def _json(response: httpx.Response, what: str) -> Any:
        """The answer's JSON. pydantic's parser (in Rust) reads a page of events in two thirds of the
        standard library's time, but refuses what the standard library takes (half a surrogate pair
        in a string, deep nesting, a byte-order mark): such an answer is read again by the standard
        library, so one odd event still reaches its own check instead of failing the page."""
        try:
            return pydantic_core.from_json(response.content)
        except ValueError:
            pass
        try:
            return response.json()
        except ValueError:
            raise not_json(response, what) from None

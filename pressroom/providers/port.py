"""What the jobs need of an email provider, in the provider's neutral words.

Send a batch of one message with per-recipient values and a mark of our own; say whether a marked
send was accepted; read events in a window, a page at a time; report the provider's limits. Every
provider (one package under pressroom/providers/) implements `EmailProvider`; jobs and commands
see only this module.

A send returns what the provider accepted, per recipient (`SendResult`), or raises a `ProviderError` whose
`outcome` says what the attempt achieved: certainly not accepted (sending again cannot make a
second copy) or uncertain (it may be queued: look it up with `find_accepted` before sending again).
Errors carry typed `ErrorDetails`, never details by position. Their texts hold neither a key nor
an address.

Personalisation: the renderer writes `{{recipient.NAME}}` where each reader's value goes (see
`placeholder`); each provider turns that into its own syntax when it prepares a message.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, Protocol, Self

from pydantic import BaseModel, Field
from temporalio.exceptions import ApplicationError

from pressroom.delivery_events import DeliveryEvent, EventRejected

if TYPE_CHECKING:
    import httpx

# What one send attempt achieved, as senders persist it (email_batches, automated_email_recipients).
ACCEPTED: Final = "accepted"  # the provider took it and named its id
NOT_ACCEPTED: Final = "not_accepted"  # certainly not queued: sending again cannot make a second copy
UNCERTAIN: Final = "uncertain"  # may be queued: look it up before sending again
SendOutcome = Literal["accepted", "not_accepted", "uncertain"]

# Our marks, sent with every newsletter batch: an event carrying them names our email and batch.
EMAIL_MARK = "email-id"
BATCH_MARK = "pressroom-batch"

# The event names a query may ask for (a failure is one name for both severities).
EventName = Literal["accepted", "delivered", "opened", "clicked", "failed", "unsubscribed", "complained"]

# --- neutral placeholders -------------------------------------------------------------------------

PLACEHOLDER = re.compile(r"\{\{recipient\.([A-Za-z0-9_]+)\}\}")


def placeholder(name: str) -> str:
    """Where a reader's value `name` goes in a subject, a body or a header."""
    return f"{{{{recipient.{name}}}}}"


def fill_placeholders(text: str, value: Callable[[str], str]) -> str:
    """`text` with every placeholder replaced by `value(name)` (a provider's syntax, or a reader's value)."""
    return PLACEHOLDER.sub(lambda match: value(match.group(1)), text) if "{{recipient." in text else text


# --- errors ---------------------------------------------------------------------------------------

class ErrorDetails(BaseModel):
    """What a provider's failure says beyond its text."""

    status_code: int | None = None  # the provider's HTTP status, when it answered
    retry_after: float | None = Field(default=None, ge=0)  # seconds the provider asked us to wait
    limit: int | None = Field(default=None, ge=1)  # recipients per message it takes, when it said so
    may_have_been_accepted: bool = False  # the message may be queued all the same


class ProviderError(Exception):
    """Base of every provider failure; `retryable` says whether trying again can help."""

    retryable: ClassVar[bool] = False
    accepted_unless_told: ClassVar[bool] = False  # `may_have_been_accepted` when the raiser does not say
    # Set when the provider answered each recipient and took none (SES): what it said of each, so
    # that a sender resending recipients refused for the moment (a requeued batch) can count them.
    answered: SendResult | None = None

    def __init__(self, message: str, details: ErrorDetails | None = None, **fields: Any) -> None:
        super().__init__(message)
        if details is None:
            fields.setdefault("may_have_been_accepted", self.accepted_unless_told)
            details = ErrorDetails(**fields)
        self.details = details

    @property
    def outcome(self) -> SendOutcome:
        """UNCERTAIN when the message may be queued at the provider all the same, else NOT_ACCEPTED."""
        return UNCERTAIN if self.details.may_have_been_accepted else NOT_ACCEPTED

    @property
    def status_code(self) -> int | None:
        return self.details.status_code

    @property
    def retry_after(self) -> float | None:
        return self.details.retry_after

    @property
    def limit(self) -> int | None:
        return self.details.limit

    @property
    def may_have_been_accepted(self) -> bool:
        return self.details.may_have_been_accepted

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.args[0]!r}, status_code={self.status_code!r})"


class ProviderRejected(ProviderError):
    """The provider refused the request as it stands (a 4xx other than a rate limit): do not retry."""


class TooManyRecipients(ProviderRejected):
    """A batch larger than the provider takes; refused before any request is made."""


class RecipientLimitExceeded(ProviderRejected):
    """The provider refused the batch for its number of recipients (a new or probation account).
    Nothing was accepted; smaller batches will be. `limit` is the size it named, if any."""


class ProviderRateLimited(ProviderError):
    """The provider asked us to slow down; `retry_after` in seconds when it said."""

    retryable = True


class ProviderUnavailable(ProviderError):
    """The provider failed or could not be reached. `may_have_been_accepted` is False only when the
    request certainly never reached it (no connection, a request never fully written)."""

    retryable = True
    accepted_unless_told = True


class ProviderBadResponse(ProviderError):
    """An answer that is not what the provider documents (a proxy's page, no message id): worth
    retrying; to a send, uncertain, since the message may have been queued."""

    retryable = True
    accepted_unless_told = True


def activity_error(error: ProviderError, message: str | None = None) -> ApplicationError:
    """A provider's failure as an activity raises it: its neutral type name (what retry policies
    list), its details typed (a dict of ErrorDetails, never by position), and not retried when
    retrying cannot help."""
    return ApplicationError(message or str(error), error.details.model_dump(mode="json"), type=type(error).__name__,
                            non_retryable=not error.retryable)


# --- what is sent, what is read -------------------------------------------------------------------

@dataclass(frozen=True)
class Message:
    """What every batch of one message carries alike; placeholders as `placeholder` writes them."""

    from_address: str
    subject: str
    html: str
    text: str
    tags: Sequence[str] = ()
    headers: Mapping[str, str] = field(default_factory=dict)
    tracking_opens: bool | None = None
    tracking_clicks: bool | None = None
    test_mode: bool = False


class PreparedMessage(Protocol):
    """A message in the provider's own form, made once and sent with many batches."""

    @property
    def size(self) -> int:
        """Bytes held in memory, for a cache to count."""


@dataclass(frozen=True)
class ProviderLimits:
    """What one call takes; batch sizes ask this (never more recipients than `max_recipients`)."""

    max_recipients: int  # recipients of one send call (Mailgun 1,000 per message, SES 50 per bulk call)
    max_tags: int  # tags of one message
    max_events_page: int  # events of one page (0: events cannot be read a page at a time)


@dataclass(frozen=True)
class AccountQuota:
    """What the account may send, as the provider states it (SES's sending quota); None: nothing
    stated. Send caps take the smaller of this and PRESSROOM_HOURLY/DAILY_SEND_LIMIT.

    With `sent_last_24_hours` (SES's SentLast24Hours, what the whole account sent in the rolling
    day, as the provider counts it), the day's cap is the room the provider says is left,
    `per_day - sent_last_24_hours`, for the account, not a UTC day's count of Pressroom's own sends."""

    per_day: int | None = None  # messages a day (SES: in any 24 hours)
    rate_per_second: float | None = None  # messages a second
    sent_last_24_hours: int | None = None

    @property
    def room_today(self) -> int | None:
        """Messages the account may still send in the rolling day; None: not stated."""
        if self.per_day is None or self.sent_last_24_hours is None:
            return None
        return max(0, self.per_day - self.sent_last_24_hours)

    @property
    def per_hour(self) -> int | None:
        return int(self.rate_per_second * 3600) if self.rate_per_second else None


# How an uncertain send is confirmed: by asking the provider's events API for our marks, or only
# from the pushed events Pressroom itself has received and kept (a provider with nothing to poll).
CONFIRM_BY_QUERY: Final = "query"
CONFIRM_BY_RECEIVED_EVENTS: Final = "received_events"


@dataclass(frozen=True)
class Capabilities:
    confirms_by: Literal["query", "received_events"]
    polls_events: bool  # `read_events` works; False: events only arrive pushed


@dataclass(frozen=True)
class SendResult:
    """What one send call achieved. `provider_id` names the call (stored with the batch); `accepted`
    maps each accepted recipient to the provider's id of their copy (Mailgun: the batch's id for
    all); `refused` maps a recipient the provider turned away on its own to a one-line reason
    without their address (SES answers each destination apart), `refused_temporarily` names those
    of them refused for the moment (throttling, a transient failure) rather than for good: a sender
    sends them again, after `retry_after` seconds."""

    provider_id: str
    accepted: Mapping[str, str]
    refused: Mapping[str, str] = field(default_factory=dict)
    refused_temporarily: frozenset[str] = frozenset()
    retry_after: float | None = None

    @classmethod
    def whole(cls, provider_id: str, recipients: Sequence[str]) -> SendResult:
        """One id for every recipient of a batch accepted whole."""
        return cls(provider_id, {address: provider_id for address in recipients})


@dataclass(frozen=True)
class EventQuery:
    """Events of a window, oldest first: only the names asked for, only messages carrying every tag."""

    begin: datetime
    end: datetime | None = None
    names: Sequence[EventName] = ()  # every name when empty
    tags: Sequence[str] = ()
    limit: int = 300


@dataclass(frozen=True)
class EventsPage:
    """One page of events as the provider wrote them (`parse_event` reads each), the token of the
    next page (None on the last) and the time of the page's last event (epoch seconds)."""

    items: list[Any]
    next_page: str | None
    last_timestamp: float | None


@dataclass(frozen=True)
class PushedEvent:
    """A pushed event whose signature was checked: its timestamp, the identity the provider gave it
    (Mailgun: the one-time token; SNS: the MessageId), kept to refuse a second copy, and the event."""

    timestamp: int
    identity: str
    item: Any  # None: a message that carries no event (SNS's subscription confirmation), answered `said`
    keep_seconds: float | None = None  # how long after `timestamp` the identity is kept; None: the retry window
    said: str = "ignored"

    @property
    def token(self) -> str:
        """The identity under the name the receiver stores it by (webhook_tokens.token)."""
        return self.identity


@dataclass(frozen=True)
class SenderState:
    """Whether the provider lets this account send from an address now: the identity it checked (a
    domain, or the address itself), and what it states of it (DKIM, SPF or MAIL FROM) in one line."""

    identity: str
    verified: bool
    detail: str


class EmailProvider(Protocol):
    """One account of an email provider, sending from one `scope` (Mailgun: the sending domain)."""

    name: str  # stored beside what comes from it (events set aside, webhook rows): "mailgun"
    title: str  # for people: "Mailgun"
    limits: ProviderLimits
    capabilities: Capabilities

    @property
    def scope(self) -> str: ...

    def for_scope(self, scope: str) -> EmailProvider:
        """The same account sending from another scope (domain warming's fallback domain)."""

    def message_id(self, own: str) -> str:
        """A Message-Id of ours for this scope, from a unique `own` part."""

    def prepare(self, message: Message) -> PreparedMessage: ...

    async def send(self, message: PreparedMessage, recipients: Mapping[str, Mapping[str, str]], *,
                   mark: Mapping[str, str], message_id: str | None = None, headers: Mapping[str, str] = {},
                   delivery_time: datetime | None = None) -> SendResult:
        """Queue the message for `recipients` (address → their values); what was accepted.
        `mark` travels with the message and comes back in its events; `headers` are this batch's."""

    async def find_accepted(self, *, recipient: str, mark: Mapping[str, str], begin: datetime, end: datetime,
                            message_id: str | None = None) -> str | None:
        """The provider's id of the message that proves an uncertain send was accepted, or None: not
        visible yet (events may come late), which is not "not accepted". Only the events' own
        fields count: every item of `mark`, or our `message_id`. A provider that `confirms_by`
        received events answers from `received` (see `ReceivedEvents`), never from a query."""

    async def account_quota(self, at: datetime | None = None) -> AccountQuota:
        """The account's sending quota as the provider states it (SES's GetAccount), or an empty
        one: a provider without one, or whose answer cannot be read now (the configured caps hold).
        `at`: the caller's clock when it is a workflow's; a reading kept for reuse is read again once
        it is stale by either clock."""

    async def find_accepted_each(self, *, recipients: Sequence[str], mark: Mapping[str, str], begin: datetime,
                                 end: datetime) -> Mapping[str, str] | None:
        """For a provider that answers each recipient of a call apart (SES): the provider's id of
        each recipient's accepted copy found by `mark`, in [begin, end]; a recipient missing is not
        found yet. None from a provider that accepts a call whole (Mailgun): `find_accepted` of one
        recipient speaks for them all."""

    async def check_account(self) -> str:
        """One call that proves the account answers with these credentials now; a line saying what it
        is and what it states (`pressroom check` prints it), or a ProviderError."""

    async def sender_state(self, from_address: str) -> SenderState:
        """Whether mail from `from_address` is sent from an identity the provider has verified
        (Mailgun: the sending domain; SES: the address or its domain), or a ProviderError."""

    async def read_events(self, page: str | None, query: EventQuery) -> EventsPage:
        """The first page of `query`, or the page a token names (a retry resumes there)."""

    def parse_event(self, item: Any) -> DeliveryEvent | EventRejected:
        """One event as the provider wrote it (polled or pushed), checked; never raises."""

    async def remove_suppressions(self, address: str) -> list[str]:
        """Take the address off this scope's suppression lists; the lists it was on. Safe to repeat."""

    async def register_push(self, url: str) -> dict[str, str]:
        """Have every kind of event Pressroom applies pushed to `url`: kind → created, added or
        unchanged. Another URL already registered stays."""

    async def aclose(self) -> None: ...


class DomainScopedClient:
    """What a provider client over HTTP that sends from one domain of an account shares: the domain
    is its scope, and a client for another domain of the same account (domain warming's fallback)
    shares its connections; close only the original."""

    domain: str
    _http: httpx.AsyncClient

    @property
    def scope(self) -> str:
        return self.domain

    def for_scope(self, scope: str) -> Self:
        if scope == self.domain:
            return self
        sibling = copy.copy(self)
        sibling.domain = scope
        return sibling

    def message_id(self, own: str) -> str:
        return f"{own}@{self.domain}"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class EventPush(Protocol):
    """The receiving end of a provider's pushed events (webhooks): needs no API key. The receiver
    (frontdoor/receiver.py) reads the body, has it verified here, then stores what it carries."""

    name: str
    path: str  # where the receiver listens: /webhooks/<name>
    refused_status: int  # the answer to a request that cannot be right later (Mailgun: 406, "do not retry")
    replay_refused: bool  # a second copy is refused (Mailgun's one-time tokens), or answered stored (SNS's retries)

    async def verify(self, body: Any, now: float, max_age: float, retry_window: float | None = None) -> PushedEvent:
        """The request's signature checked and fresh (signed at most `retry_window` ago, `max_age`
        ahead); ValueError with a one-line reason otherwise, ConnectionError when it cannot be
        checked now (SNS: its certificate). A message that carries no event (SNS's subscription
        confirmation) is dealt with here and comes back with `item` None."""

    def parse_event(self, item: Any) -> DeliveryEvent | EventRejected: ...

    def acceptance_marks(self, item: Any, event: DeliveryEvent) -> dict[str, str] | None:
        """Our marks of an accepted-kind event, kept to confirm uncertain sends (a provider that
        `confirms_by` received events: SES); None for an event stored in the inbox."""

"""An email provider in memory: the port's contract with nothing behind it, for the fast test tier.

It accepts messages, keeps each reader's personalised copy, and writes an `accepted` and a
`delivered` event per recipient. Its switches play the worst cases the Mailgun simulator plays
(`Faults`): an answer lost after the message was accepted, a rate limit, an outage, a refusal for
the batch's size, events visible only some time after they happened, every event read twice.
Its clock is its own (`advance`), so late events need no sleeping.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pydantic

from pressroom.delivery_events import DeliveryEvent, EventRejected
from pressroom.providers.port import (
    BATCH_MARK,
    CONFIRM_BY_QUERY,
    EMAIL_MARK,
    AccountQuota,
    Capabilities,
    EventQuery,
    EventsPage,
    Message,
    PreparedMessage,
    ProviderLimits,
    ProviderRateLimited,
    ProviderRejected,
    ProviderUnavailable,
    RecipientLimitExceeded,
    SenderState,
    SendResult,
    TooManyRecipients,
    fill_placeholders,
)

PROVIDER = "memory"
PUSH_KINDS = ("delivered", "opened", "failed", "unsubscribed", "complained")
_FAILED = {"failed-permanent": "permanent", "failed-temporary": "temporary"}


@dataclass
class Faults:
    """What goes wrong; all off by default. Counts are of the next sends, used up as they happen."""

    lost_answers: int = 0  # accepted, then no answer: the sender sees an uncertain failure
    rate_limited: int = 0  # refused with a rate limit asking to wait `retry_after` seconds
    retry_after: float | None = 1.0
    outage: bool = False  # nothing reaches the provider: sends are certainly not accepted, reads fail
    refused: bool = False  # every request refused as it stands (a wrong key, an unknown domain)
    recipient_limit: int | None = None  # a batch with more recipients is refused for its size
    events_delay: float = 0.0  # an event is visible this long after it happened
    duplicate_events: bool = False  # every event is read twice (delivery is at least once)


@dataclass(frozen=True)
class MemoryMessage:
    message: Message

    @property
    def size(self) -> int:
        return sum(len(part.encode()) for part in (self.message.subject, self.message.html, self.message.text))


@dataclass(frozen=True)
class Sent:
    """One accepted message: what each recipient reads, its mark and ids."""

    provider_id: str
    scope: str
    message: Message
    recipients: dict[str, dict[str, str]]
    mark: dict[str, str]
    message_id: str | None
    headers: dict[str, str]
    delivery_time: datetime | None

    def personalised(self, address: str) -> tuple[str, str, str]:
        """(subject, html, text) as this recipient reads them."""
        values = self.recipients[address]
        return tuple(fill_placeholders(part, lambda name: values.get(name, ""))  # type: ignore[return-value]
                     for part in (self.message.subject, self.message.html, self.message.text))


@dataclass
class _Account:
    """What every scope of one account shares."""

    clock: Any
    faults: Faults = field(default_factory=Faults)
    sent: list[Sent] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    suppressed: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (scope, list) → addresses
    pushes: dict[str, list[str]] = field(default_factory=dict)
    unverified_domains: set[str] = field(default_factory=set)  # sending from these is refused
    offset: float = 0.0
    ids: Any = field(default_factory=itertools.count)

    def now(self) -> float:
        return self.clock() + self.offset


class MemoryProvider:
    """The port's `EmailProvider` in memory; `for_scope` shares the account (messages, events, faults)."""

    name = PROVIDER
    title = "the in-memory provider"
    capabilities = Capabilities(confirms_by=CONFIRM_BY_QUERY, polls_events=True)

    def __init__(self, scope: str = "mail.memory.test", *, limits: ProviderLimits | None = None,
                 clock=time.time, _account: _Account | None = None) -> None:
        self.scope = scope
        self.limits = limits or ProviderLimits(max_recipients=1000, max_tags=3, max_events_page=300)
        self._account = _account or _Account(clock)

    def __repr__(self) -> str:
        return f"MemoryProvider(scope={self.scope!r})"

    # --- for tests ---

    @property
    def faults(self) -> Faults:
        return self._account.faults

    @property
    def sent(self) -> list[Sent]:
        return self._account.sent

    def now(self) -> float:
        return self._account.now()

    def advance(self, seconds: float) -> None:
        """Move the clock forward: late events become visible without sleeping."""
        self._account.offset += seconds

    def add_event(self, kind: str, recipient: str, sent: Sent, **fields: Any) -> dict[str, Any]:
        """An event of `kind` (a DeliveryEvent kind) for a recipient of an accepted message, now."""
        item = {"id": f"ev-{next(self._account.ids)}", "kind": kind, "name": kind.split("-")[0],
                "timestamp": self.now(), "recipient": recipient, "scope": sent.scope, "mark": sent.mark,
                "tags": list(sent.message.tags), "provider_message_id": sent.provider_id,
                "severity": _FAILED.get(kind), **fields}
        self._account.events.append(item)
        return item

    def suppress(self, address: str, list_name: str = "bounces") -> None:
        self._account.suppressed.setdefault((self.scope, list_name), set()).add(address.casefold())

    # --- the port ---

    def for_scope(self, scope: str) -> MemoryProvider:
        return self if scope == self.scope else MemoryProvider(scope, limits=self.limits, _account=self._account)

    def message_id(self, own: str) -> str:
        return f"{own}@{self.scope}"

    def prepare(self, message: Message) -> MemoryMessage:
        if len(message.tags) > self.limits.max_tags:
            raise ProviderRejected(f"a message takes at most {self.limits.max_tags} tags, got {len(message.tags)}")
        return MemoryMessage(message)

    async def send(self, message: PreparedMessage, recipients: Mapping[str, Mapping[str, str]], *,
                   mark: Mapping[str, str], message_id: str | None = None, headers: Mapping[str, str] = {},
                   delivery_time: datetime | None = None) -> SendResult:
        assert isinstance(message, MemoryMessage)  # what this provider's prepare() made
        self._refuse(len(recipients))
        sent = Sent(f"{next(self._account.ids)}.{self.scope}@memory", self.scope, message.message,
                    {address: dict(values) for address, values in recipients.items()}, dict(mark), message_id,
                    dict(headers), delivery_time)
        self._account.sent.append(sent)
        for address in recipients:
            self.add_event("accepted", address, sent)
            self.add_event("delivered", address, sent)
        if self.faults.lost_answers:
            self.faults.lost_answers -= 1
            raise ProviderUnavailable(f"the in-memory provider lost its answer to a batch of {len(recipients)} "
                                      "recipients; it may have been accepted")
        return SendResult.whole(sent.provider_id, list(recipients))

    def _reachable(self) -> None:
        if self.faults.outage:
            raise ProviderUnavailable("the in-memory provider cannot be reached; nothing was sent or read",
                                      may_have_been_accepted=False)
        if self.faults.refused:
            raise ProviderRejected("the in-memory provider refused the request (401): the key is not valid",
                                   status_code=401)

    def _refuse(self, recipients: int) -> None:
        """The refusals that come before a message is accepted, in the order a provider meets them."""
        faults = self.faults
        self._reachable()
        if not recipients:
            raise ProviderRejected("a batch needs at least one recipient")
        if recipients > self.limits.max_recipients:
            raise TooManyRecipients(f"a batch of {recipients} recipients exceeds the limit of "
                                    f"{self.limits.max_recipients} per message")
        if faults.recipient_limit is not None and recipients > faults.recipient_limit:
            raise RecipientLimitExceeded(f"the in-memory provider refused a batch of {recipients} recipients for "
                                         "its size", status_code=400, limit=faults.recipient_limit)
        if faults.rate_limited:
            faults.rate_limited -= 1
            raise ProviderRateLimited("the in-memory provider rate-limited the batch", status_code=429,
                                      retry_after=faults.retry_after)

    def _visible(self, query: EventQuery | None = None) -> list[dict[str, Any]]:
        """The events of this scope visible now (and in the query's window, names and tags), oldest first."""
        self._reachable()
        seen_before = self.now() - self.faults.events_delay
        found = [event for event in self._account.events
                 if event["scope"] == self.scope and event["timestamp"] <= seen_before
                 and (query is None or _matches(event, query))]
        found.sort(key=lambda event: event["timestamp"])
        return [event for event in found for _ in range(2 if self.faults.duplicate_events else 1)]

    async def find_accepted(self, *, recipient: str, mark: Mapping[str, str], begin: datetime, end: datetime,
                            message_id: str | None = None) -> str | None:
        for event in self._visible(EventQuery(begin=begin, end=end, names=("accepted",))):
            if event["recipient"].casefold() != recipient.casefold():
                continue
            sent = next(s for s in self._account.sent if s.provider_id == event["provider_message_id"])
            if all(event["mark"].get(k) == v for k, v in mark.items()) or \
                    (message_id is not None and sent.message_id == message_id):
                return sent.provider_id
        return None

    async def find_accepted_each(self, *, recipients: Sequence[str], mark: Mapping[str, str], begin: datetime,
                                 end: datetime) -> Mapping[str, str] | None:
        return None  # a message is accepted for all its recipients or for none

    async def check_account(self) -> str:
        self._reachable()
        return f"in memory, scope {self.scope}"

    async def sender_state(self, from_address: str) -> SenderState:
        self._reachable()
        domain = from_address.rpartition("@")[2].lower()
        verified = domain not in self._account.unverified_domains
        return SenderState(domain, verified, "in memory" if verified else "in memory, not verified")

    async def account_quota(self, at: datetime | None = None) -> AccountQuota:
        """None stated."""
        return AccountQuota()

    async def read_events(self, page: str | None, query: EventQuery) -> EventsPage:
        start = int(page) if page else 0
        items = self._visible(query)[start:start + query.limit]
        following = start + len(items)
        return EventsPage(items=[dict(item) for item in items],
                          next_page=str(following) if len(items) == query.limit else None,
                          last_timestamp=items[-1]["timestamp"] if items else None)

    def parse_event(self, item: Any) -> DeliveryEvent | EventRejected:
        try:
            if not isinstance(item, dict) or not isinstance(item.get("mark"), dict):
                raise ValueError("the event is not an object with a mark")
            mark = item["mark"]
            return DeliveryEvent(
                provider=PROVIDER, event_id=item["id"], kind=item["kind"], name=item["name"],
                timestamp=item["timestamp"], recipient=item["recipient"], email_id=mark.get(EMAIL_MARK),
                batch_id=mark.get(BATCH_MARK), provider_message_id=item.get("provider_message_id"),
                **{key: item[key] for key in ("severity", "reason", "code", "enhanced_code", "message") if key in item})
        except (KeyError, ValueError, pydantic.ValidationError) as error:
            reason = error.errors()[0]["msg"] if isinstance(error, pydantic.ValidationError) else str(error)
            return EventRejected(provider=PROVIDER, reason=f"unusable event: {reason}"[:200],
                                 event_id=item.get("id") if isinstance(item, dict) else None)

    async def remove_suppressions(self, address: str) -> list[str]:
        self._reachable()
        removed = []
        for list_name in ("bounces", "unsubscribes", "complaints"):
            listed = self._account.suppressed.get((self.scope, list_name), set())
            if address.casefold() in listed:
                listed.discard(address.casefold())
                removed.append(list_name)
        return removed

    async def register_push(self, url: str) -> dict[str, str]:
        outcome = {}
        for kind in PUSH_KINDS:
            urls = self._account.pushes.setdefault(kind, [])
            outcome[kind] = "unchanged" if url in urls else "added" if urls else "created"
            if url not in urls:
                urls.append(url)
        return outcome

    async def aclose(self) -> None:
        return None


def _matches(event: dict[str, Any], query: EventQuery) -> bool:
    end = query.end.timestamp() if query.end is not None else float("inf")
    return (query.begin.timestamp() <= event["timestamp"] < end
            and (not query.names or event["name"] in query.names)
            and all(tag in event["tags"] for tag in query.tags))

"""A local Mailgun of our own, over real HTTP: the messages and events API, with faults on demand.

Tests start it in-process on a random port (`running_simulator()`); `pressroom dev up` runs it as
`MAILGUN_SIMULATOR_API_KEY=K python -m devstack.mailgun_simulator --host 127.0.0.1 --port N --domain D`
(the key in the environment, never on the command line).

What it models
--------------
* `POST /v3/{domain}/messages` like Mailgun: Basic auth as ("api", KEY) (401 "Forbidden"
  otherwise), 404 for another domain, 400 `{"message": ...}` for a missing from/to/subject/body,
  an address without a dotted domain, more than 1,000 recipients, more than 3 `o:tag`, or bad
  `recipient-variables` / `o:deliverytime`.
  An `h:Message-Id` header becomes the message id (unless `assign_own_ids`: Mailgun does not
  promise to keep it).
* Events for every recipient of an accepted message: `accepted`; then `failed` (permanent or
  temporary) or `delivered`; after delivery maybe `opened`, `unsubscribed`, `complained`. The
  fate is a hash of (message id, address) against `Rates`, so the same send gives the same events.
  Offsets from acceptance (or from `o:deliverytime` when later): see `OFFSETS`.
* `GET /v3/{domain}/events` with begin (inclusive) / end (exclusive), as RFC 2822 or epoch
  seconds; `ascending` yes/no (default no, like Mailgun; descending reads from `begin` back to
  `end`); `limit` ≤ 300; `event` as "opened", "delivered OR failed" or "NOT opened";
  `message-id`; `recipient`; `tags` as "a", "a AND b" or "a OR b" (unless `ignore_filters`).
  `paging.next` is an absolute URL carrying an opaque position; following it later picks up what
  became visible since (Mailgun's event polling). An event is visible once its timestamp + storage
  delay (+ the lateness of a "late" event) has passed.

* Webhooks: `GET|POST /v3/domains/{domain}/webhooks`, `GET|PUT /v3/domains/{domain}/webhooks/{id}`
  register URLs per kind (form `id`, `url` up to 3); from then on every event of that kind is
  POSTed there as Mailgun does (`{"signature": {timestamp, token, signature}, "event-data"}`,
  HMAC-SHA256 with the webhook signing key, `MAILGUN_WEBHOOK_SIGNING_KEY` when run as a process),
  retried on any answer but 200 or 406 along Mailgun's schedule (`Push`).

The provider's documented worst cases, each a `Faults` switch: answers 500 without storing
(`error_rate`) or after storing (`error_after_accept_rate`: Mailgun says a 5xx may still have
sent), drops the connection after storing (`lost_response_rate`), 429 "try again after <date>"
(`rate_limit_rate`, `retry_after_seconds`), assigns its own Message-Id (`assign_own_ids`),
ignores the event query's field filters (`ignore_filters`: event, recipient, message-id), and
stores events late (`storage_delay_seconds`, or `late_event_share` of them by `late_event_seconds`).

Admin API (no auth; a loopback tool)
------------------------------------
* `GET /_sim/messages[?email_id=E]` → `[{"id", "from", "subject", "tags", "variables", "headers",
  "delivery_time", "test_mode", "accepted_at", "recipients": [{"address", "variables"}]}]`
* `GET /_sim/stats` → `{"messages", "recipients", "duplicate_recipients", "synthetic_messages",
  "events", "events_by_kind": {kind: n}, "requests": {"messages": n, "events": n}}`;
  a duplicate is a second acceptance of the same (v:email-id, address).
* `GET|POST /_sim/faults` — `Faults` fields; POST merges the keys given (`seed` reseeds).
* `GET|POST /_sim/rates` — `Rates` fields.
* `POST /_sim/clock {"advance": seconds}` — move the simulator's clock forward (events appear
  without sleeping); answers `{"now": epoch}`.
* `GET|POST /_sim/limits` — `AccountLimits` fields: what a new, probation or small-plan account
  refuses (a recipient limit per request, "large batches", hourly and daily caps).
* `GET /v4/domains/{domain}` — the domain's `state` (`active`, or `unverified` for a domain in
  `unverified_domains`) and its `sending_dns_records` (SPF, DKIM) with `valid`.
* `POST /_sim/domains {"domain": "fallback.example"}` — serve another sending domain of the same
  account (domain warming); each domain has its own events and its own caps.
* `POST /_sim/reset` — forget messages and events, restore default faults, rates and clock.
* `GET|POST /_sim/push` — `Push` fields (how events are pushed to registered webhooks: delay,
  reordering, duplicates, wrong signatures, stale timestamps, Mailgun's retry schedule scaled) and
  the pushes' counts (`push_stats`).
* `GET|POST /_sim/follow` — readers and mail scanners following the delivered copies' tracked links
  (devstack/link_followers.py: `readers`, `scanners` shares), and how many requests they made.
* `POST /_sim/hostile {"email_id", "recipients": [...], "cases": [...]}` — events no provider should
  send (`HOSTILE_CASES`: a NUL or a lone surrogate in the recipient, a code beyond int32, no id, a
  huge nested field, a timestamp that is not a number, repeated ids), served and pushed like others.
* `POST /_sim/events` — synthetic events for load tests, see `add_synthetic_events`:
  `{"email_id": "e1", "recipients": ["a@x", ...]}` or `{"email_id": "e1", "count": 500000,
  "address_pattern": "member{n}@example.com"}`, plus optional `"events": ["delivered", "opened"]`
  (each recipient gets each; "failed" is permanent, "failed-temporary" temporary),
  `"timestamp"` (epoch of the first event, default an hour ago), `"spread_seconds"` (spread the
  recipients' events over that span, in chunks of 1,000), `"tags"`, `"variables"`.
  Answers `{"message_id", "events"}`.

Storage is compact for a million recipients: a message keeps its addresses as a tuple and its
recipient variables as the JSON text it arrived with; events live in groups (one per message,
kind and lateness) holding recipient indices in an `array`, kept sorted by timestamp, so a page
is a bisect plus a slice and event JSON is built only for the page asked.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import bisect
import hashlib
import heapq
import hmac
import itertools
import json
import math
import os
import random
import re
import secrets
import signal
import socket
import struct
import time
import uuid
from array import array
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from email.utils import format_datetime, getaddresses, parsedate_to_datetime
from functools import lru_cache
from typing import Any

import aiohttp
from aiohttp import web

from devstack.link_followers import Following, LinkFollowers

MAX_RECIPIENTS = 1000
MAX_TAGS = 3
MAX_PAGE = 300
KINDS = ("accepted", "delivered", "failed", "opened", "unsubscribed", "complained")
# Seconds after acceptance (delivery: after o:deliverytime when later) at which each event happens.
OFFSETS = {"accepted": 0.0, "delivered": 1.0, "failed": 1.0, "opened": 5.0, "unsubscribed": 10.0,
           "complained": 12.0}
_KIND_SHIFT = {kind: (index * 0.6180339887) % 1.0 for index, kind in enumerate(KINDS)}
_FAILURES = {
    "permanent": {"code": 550, "enhanced-code": "5.1.1", "reason": "bounce",
                  "message": "5.1.1 The email account that you tried to reach does not exist"},
    "temporary": {"code": 452, "enhanced-code": "4.2.2", "reason": "generic",
                  "message": "4.2.2 The email account that you tried to reach is over quota"},
}
HOSTILE_CASES = ("nul-recipient", "huge-code", "no-id", "huge-nested", "bad-timestamp", "surrogate-recipient",
                 "repeated-id")
_TEMPLATE = re.compile(r"%recipient\.([A-Za-z0-9_.-]+)%")
_VALID_ADDRESS = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")  # Mailgun refuses a domain without a dot


@dataclass
class Rates:
    """Shares of recipients per outcome; opened/unsubscribed/complained are shares of the delivered."""

    failed_permanent: float = 0.02
    failed_temporary: float = 0.03
    opened: float = 0.40
    unsubscribed: float = 0.01
    # A healthy list's (Google's 0.1%), under the 0.3% at which mailbox providers and a send's own pause
    # draw the line.
    complained: float = 0.001


@dataclass
class Faults:
    """What goes wrong, and how often (shares in [0, 1]); all off by default."""

    error_rate: float = 0.0  # message POSTs answered 500, not stored
    error_after_accept_rate: float = 0.0  # message POSTs stored, then answered 500 all the same
    rate_limit_rate: float = 0.0  # message POSTs answered 429 "try again after <date>", not stored
    retry_after_seconds: float = 1.0
    lost_response_rate: float = 0.0  # message POSTs stored, then the connection dropped unanswered
    latency_ms: float = 0.0  # added to every API request
    storage_delay_seconds: float = 0.0  # every event becomes visible this long after its timestamp
    late_event_share: float = 0.0  # this share of the events of later sends is late by…
    late_event_seconds: float = 0.0  # …this many more seconds (Mailgun's eventual consistency)
    events_error_rate: float = 0.0  # event GETs answered 500
    malformed_events: bool = False  # event GETs answered with invalid JSON
    assign_own_ids: bool = False  # an h:Message-Id is kept as a header but the message gets Mailgun's own id
    ignore_filters: bool = False  # event GETs ignore event, recipient and message-id: only the time range applies


@dataclass
class AccountLimits:
    """What Mailgun refuses on a new, probation or small-plan account; 0 means no such limit.

    Caps count recipients accepted per domain in the simulator's clock hour / UTC day; a message
    that would pass a cap is refused whole with 420 "... try again after <the next window>".
    """

    recipient_limit: float = 0.0  # more recipients in one request: 420 "recipient limit exceeded"
    large_batch_limit: float = 0.0  # more recipients in one request: 403 "not allowed to send large batches yet"
    hourly_limit: float = 0.0
    daily_limit: float = 0.0


# Mailgun retries a webhook answered with anything but 200 (or 406) after 10 min, 10 min, 15 min,
# 30 min, 1 h, 2 h and 4 h, then drops it.
RETRY_SCHEDULE = (600.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0)
WEBHOOK_IDS = ("accepted", "clicked", "complained", "delivered", "opened", "permanent_fail", "temporary_fail",
               "unsubscribed")


@dataclass
class Push:
    """How events are pushed to the registered webhooks: as Mailgun does, and its worst cases."""

    enabled: bool = True
    delay_seconds: float = 0.0  # after the event happens (an event in the past goes at once)
    reorder_seconds: float = 0.0  # each push waits a further random share of this: they arrive out of order
    duplicate_rate: float = 0.0  # pushed twice, each signed afresh (delivery is at least once)
    wrong_signature_rate: float = 0.0  # signed with another key
    stale_timestamp_rate: float = 0.0  # signed an hour ago
    retry_scale: float = 1.0  # Mailgun's retry schedule (RETRY_SCHEDULE) times this: 0.001 makes 8 h 30 s
    concurrency: int = 32
    timeout_seconds: float = 10.0
    record_sends: bool = False  # keep when each push answered 200 was sent (`GET /_sim/push/sent`, benchmarks)


def _update(settings: Rates | Faults | AccountLimits | Push, changes: dict[str, Any]) -> None:
    """Apply changes by field name, refusing unknown names and out-of-range shares."""
    known = {f.name: f for f in fields(settings)}
    for name, value in changes.items():
        if name not in known:
            raise ValueError(f"unknown setting {name!r}; known: {', '.join(known)}")
        if known[name].type in ("bool", bool):
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be true or false")
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a non-negative number")
            if (name.endswith(("_rate", "_share")) or isinstance(settings, Rates)) and value > 1:
                raise ValueError(f"{name} is a share and must be between 0 and 1")
            value = float(value)
        setattr(settings, name, value)


@lru_cache(maxsize=8)
def _parse_recipient_variables(text: str) -> dict[str, dict[str, Any]]:
    return json.loads(text)


class _PatternAddresses(Sequence[str]):
    """`count` addresses made from a pattern on demand: a million synthetic members cost nothing."""

    def __init__(self, pattern: str, count: int) -> None:
        self.pattern, self.count = pattern, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> str:  # type: ignore[override]
        if not 0 <= index < self.count:
            raise IndexError(index)
        return self.pattern.format(n=index)


@dataclass(slots=True, eq=False)
class StoredMessage:
    """One accepted message, as Mailgun would have queued it."""

    id: str  # without <>
    from_address: str
    subject: str
    tags: tuple[str, ...]
    variables: dict[str, str]  # v:NAME, without the prefix
    headers: dict[str, str]  # h:NAME, without the prefix
    recipients: Sequence[str]
    recipient_variables_json: str
    accepted_at: float
    delivery_time: float | None = None
    test_mode: bool = False
    synthetic: bool = False
    html: str = ""
    text: str = ""
    options: dict[str, str] = field(default_factory=dict)  # o:NAME, without the prefix (o:tag is `tags`)
    domain: str = ""  # the sending domain it was posted to
    _templated: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._templated = any("%recipient." in value for value in self.variables.values())

    @property
    def email_id(self) -> str:
        return self.variables.get("email-id", self.id)

    def recipient_variables(self) -> dict[str, dict[str, Any]]:
        return _parse_recipient_variables(self.recipient_variables_json)

    def user_variables(self, index: int) -> dict[str, str]:
        """The v: variables as the events show them, with %recipient.x% filled in like Mailgun."""
        if not self._templated:
            return self.variables
        mine = self.recipient_variables().get(self.recipients[index], {})
        return {name: _TEMPLATE.sub(lambda m: str(mine.get(m.group(1), "")), value)
                for name, value in self.variables.items()}

    def received_by(self, address: str) -> tuple[str, str, str]:
        """(subject, html, text) as this recipient gets them: %recipient.x% filled in from their
        variables. A placeholder without a variable stays as it is, so a test can see it."""
        mine = self.recipient_variables().get(address, {})

        def fill(text: str) -> str:
            return _TEMPLATE.sub(lambda m: str(mine[m.group(1)]) if m.group(1) in mine else m.group(0), text)

        return fill(self.subject), fill(self.html), fill(self.text)

    def as_json(self) -> dict[str, Any]:
        variables = self.recipient_variables()
        return {"id": self.id, "from": self.from_address, "subject": self.subject, "tags": list(self.tags),
                "variables": self.variables, "headers": self.headers, "delivery_time": self.delivery_time,
                "test_mode": self.test_mode, "accepted_at": self.accepted_at, "domain": self.domain,
                "recipients": [{"address": a, "variables": variables.get(a, {})} for a in self.recipients]}


@dataclass(slots=True, eq=False)
class _Group:
    """Events of one kind, for some recipients of one message, sharing one timestamp."""

    seq: int
    timestamp: float
    visible_at: float
    kind: str
    severity: str | None
    message: StoredMessage
    members: Sequence[int]  # indices into message.recipients: array('I') or range
    delivery_status: dict[str, Any] | None = None  # a failure's own delivery-status, instead of the stock one
    raw: dict[str, Any] | None = None  # a hostile event, served exactly as it is (one member)


@dataclass(frozen=True, slots=True)
class _Query:
    begin: float | None
    end: float | None
    ascending: bool
    limit: int
    event: str | None
    message_id: str | None
    recipient: str | None = None
    tags: str | None = None


class _Invalid(Exception):
    """A request Mailgun would answer 400; the text is Mailgun-style."""


def _parse_time(value: str, name: str) -> float:
    try:
        return float(value)
    except ValueError:
        pass
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        raise _Invalid(f"{name} is not a valid date: use RFC 2822 or epoch seconds") from None
    if moment.tzinfo is None:
        raise _Invalid(f"{name} needs a timezone")
    return moment.timestamp()


def _event_matcher(expression: str | None) -> Callable[[str], bool]:
    """Mailgun's filter expressions, the part we need: "a", "a OR b", "NOT a", "NOT (a OR b)"."""
    if not expression or not expression.strip():
        return lambda kind: True
    text = expression.strip()
    negate = text.startswith("NOT ")
    if negate:
        text = text[4:].strip()
    names = frozenset(part.strip() for part in text.strip("()").split(" OR "))
    if not names <= set(KINDS) | {"rejected", "clicked", "stored"}:
        raise _Invalid(f"'{expression}' is not a valid event filter")
    return (lambda kind: kind not in names) if negate else (lambda kind: kind in names)


def _tags_matcher(expression: str | None) -> Callable[[Sequence[str]], bool]:
    """The `tags` filter, the part we need: "a", "a AND b" (every one), "a OR b" (any one)."""
    if not expression or not expression.strip():
        return lambda tags: True
    if " AND " in expression and " OR " in expression:
        raise _Invalid(f"'{expression}' is not a valid tags filter")
    every = " AND " in expression
    names = frozenset(part.strip() for part in expression.split(" AND " if every else " OR "))
    if not all(names):
        raise _Invalid(f"'{expression}' is not a valid tags filter")
    return (lambda tags: names <= set(tags)) if every else (lambda tags: bool(names & set(tags)))


def _addresses(values: Iterable[str]) -> list[str]:
    """Bare addresses from `to` fields; the fast path skips the parser for plain addresses."""
    out: list[str] = []
    for value in values:
        if "," in value or "<" in value:
            out.extend(address for _, address in getaddresses([value]) if address)
        else:
            value = value.strip()
            if value:
                out.append(value)
    return out


def _fates(message_id: str, address: str) -> tuple[float, ...]:
    """Five independent uniform numbers in [0, 1) for one recipient of one message."""
    digest = hashlib.blake2b(f"{message_id}\0{address}".encode(), digest_size=20).digest()
    return tuple(part / 4294967296.0 for part in struct.unpack(">5I", digest))


class MailgunSimulator:
    """The simulator's state and HTTP server; tests may read `messages` and call the admin methods."""

    def __init__(self, *, api_key: str, domain: str, seed: int = 0,
                 webhook_signing_key: str = "sim-webhook-signing-key") -> None:
        self.api_key = api_key
        self.webhook_signing_key = webhook_signing_key
        self.webhooks: dict[str, dict[str, list[str]]] = {}  # domain → webhook id → URLs
        self.push = Push()
        self.push_counts: Counter[str] = Counter()
        # heap: (due, n, group, position, attempt, url)
        self._pushes: list[tuple[float, int, _Group, int, int, str]] = []
        self._push_n = itertools.count()
        self._push_wake = asyncio.Event()
        self._pusher: asyncio.Task | None = None
        self._in_flight = 0
        self.sent_at = array("d")  # with Push.record_sends: when each push answered 200 was sent
        self.domain = domain
        self.domains = {domain}  # the account's sending domains; `add_domain` adds more
        self.unverified_domains: set[str] = set()  # domains whose DNS records Mailgun has not verified
        # Suppression lists per (domain, list): bounces, unsubscribes, complaints.
        self.suppressed: dict[tuple[str, str], set[str]] = defaultdict(set)
        self.limits = AccountLimits()
        self.seed = seed
        self.base_url = ""
        self.messages: list[StoredMessage] = []
        self.request_counts: Counter[str] = Counter()
        self.faults = Faults()
        self.rates = Rates()
        self.clock_offset = 0.0
        self._rng = random.Random(seed)
        self._keys: list[tuple[float, int]] = []  # (timestamp, seq), sorted; parallel to _groups
        self._groups: list[_Group] = []
        self._seq = itertools.count(1)  # never reset: event ids stay unique for the process
        # …and a prefix of this process's own, as Mailgun's ids are unique: a simulator started
        # again (`dev down` / `dev up`) does not reuse the ids a database already holds.
        self.id_prefix = secrets.token_hex(3)
        self._runner: web.AppRunner | None = None
        self._auth = "Basic " + base64.b64encode(f"api:{api_key}".encode()).decode()
        self.links = LinkFollowers()

    def __repr__(self) -> str:
        return f"MailgunSimulator(domain={self.domain!r}, base_url={self.base_url!r})"

    # --- the Python API for tests ---

    def now(self) -> float:
        return time.time() + self.clock_offset

    def advance(self, seconds: float) -> None:
        """Move the simulator's clock forward, so later events become visible without sleeping."""
        self.clock_offset += seconds

    def reset(self) -> None:
        self.messages.clear()
        self._keys.clear()
        self._groups.clear()
        self.request_counts.clear()
        self.faults = Faults()
        self.rates = Rates()
        self.limits = AccountLimits()
        self.domains = {self.domain}
        self.unverified_domains = set()
        self.suppressed.clear()
        self.clock_offset = 0.0
        self._rng = random.Random(self.seed)
        self.webhooks.clear()
        self.push = Push()
        self.push_counts.clear()
        self._pushes.clear()
        self.sent_at = array("d")
        self.links.following = Following()

    def set_faults(self, **changes: Any) -> None:
        if "seed" in changes:
            self.seed = int(changes.pop("seed"))
            self._rng = random.Random(self.seed)
        _update(self.faults, changes)

    def set_rates(self, **changes: Any) -> None:
        _update(self.rates, changes)

    def set_limits(self, **changes: Any) -> None:
        _update(self.limits, changes)

    def set_push(self, **changes: Any) -> None:
        _update(self.push, changes)
        self._push_wake.set()

    def push_stats(self) -> dict[str, Any]:
        """Pushes by outcome: `pushed` (attempts), `answered_<status>`, `errors` (no answer), `retries`
        (scheduled), `gave_up` (retries spent), `duplicates`; `pending` waiting or in flight."""
        return {**self.push_counts, "pending": len(self._pushes) + self._in_flight}

    def add_domain(self, domain: str) -> None:
        """Serve another sending domain of this account (the fallback domain of domain warming)."""
        if not domain or "/" in domain:
            raise ValueError("give a domain name")
        self.domains.add(domain)

    @property
    def event_count(self) -> int:
        return sum(len(group.members) for group in self._groups)

    def messages_for(self, email_id: str) -> list[StoredMessage]:
        return [m for m in self.messages if not m.synthetic and m.email_id == email_id]

    def stats(self) -> dict[str, Any]:
        real = [m for m in self.messages if not m.synthetic]
        seen: set[int] = set()
        duplicates = 0
        for message in real:
            email_id = message.email_id
            for address in message.recipients:
                key = hash((email_id, address))
                if key in seen:
                    duplicates += 1
                else:
                    seen.add(key)
        by_kind: Counter[str] = Counter()
        for group in self._groups:
            by_kind[group.kind] += len(group.members)
        return {"messages": len(real), "recipients": sum(len(m.recipients) for m in real),
                "duplicate_recipients": duplicates, "synthetic_messages": len(self.messages) - len(real),
                "events": sum(by_kind.values()), "events_by_kind": dict(by_kind),
                "requests": dict(self.request_counts)}

    def add_synthetic_events(self, *, email_id: str, recipients: Sequence[str] | None = None,
                             count: int | None = None, address_pattern: str = "member{n}@example.com",
                             events: Sequence[str] = ("delivered", "opened"), timestamp: float | None = None,
                             spread_seconds: float = 0.0, tags: Sequence[str] = (),
                             variables: dict[str, str] | None = None, chunk: int = 1000,
                             delivery_status: dict[str, Any] | None = None) -> dict[str, Any]:
        """Events without sending, for load tests: each recipient gets each of `events`.

        Recipients are a list or `count` addresses from `address_pattern` ("{n}" is 0..count-1).
        Timestamps start at `timestamp` (default an hour ago, so all visible) plus each kind's offset,
        spread over `spread_seconds` in chunks of `chunk` recipients. Faults do not apply.
        `delivery_status` replaces a failed event's stock delivery-status (code, message, description).
        """
        if recipients is None:
            if count is None or count < 0 or "{n}" not in address_pattern:
                raise ValueError("give `recipients`, or `count` with an `address_pattern` containing {n}")
            recipients = _PatternAddresses(address_pattern, count)
        kinds: list[tuple[str, str | None]] = []
        for name in events:
            if name == "failed-temporary":
                kinds.append(("failed", "temporary"))
            elif name in KINDS:
                kinds.append((name, "permanent" if name == "failed" else None))
            else:
                raise ValueError(f"unknown event {name!r}; known: {', '.join(KINDS)}, failed-temporary")
        start = self.now() - 3600 if timestamp is None else float(timestamp)
        message = StoredMessage(
            id=f"{uuid.uuid4().hex}@{self.domain}", from_address=f"synthetic@{self.domain}",
            subject="synthetic events", tags=tuple(tags), variables={"email-id": email_id, **(variables or {})},
            headers={}, recipients=recipients, recipient_variables_json="{}", accepted_at=start, synthetic=True,
            domain=self.domain)
        self.messages.append(message)
        chunks = max(1, math.ceil(len(recipients) / chunk))
        step = spread_seconds / chunks
        for number in range(chunks):
            members = range(number * chunk, min(len(recipients), (number + 1) * chunk))
            for kind, severity in kinds:
                moment = start + OFFSETS[kind] + number * step
                self._insert(_Group(next(self._seq), moment, moment, kind, severity, message, members,
                                    delivery_status if kind == "failed" else None))
        return {"message_id": message.id, "events": len(recipients) * len(kinds)}

    def add_hostile_events(self, *, email_id: str, recipients: Sequence[str], cases: Sequence[str] = HOSTILE_CASES,
                           timestamp: float | None = None) -> dict[str, Any]:
        """Events a provider should never send and a receiver must survive, one per case and
        recipient (in the events API, and pushed like any other): see HOSTILE_CASES."""
        unknown = set(cases) - set(HOSTILE_CASES)
        if unknown:
            raise ValueError(f"unknown case {sorted(unknown)[0]!r}; known: {', '.join(HOSTILE_CASES)}")
        start = self.now() - 60 if timestamp is None else float(timestamp)
        message = StoredMessage(
            id=f"{uuid.uuid4().hex}@{self.domain}", from_address=f"hostile@{self.domain}", subject="hostile events",
            tags=(), variables={"email-id": email_id}, headers={}, recipients=tuple(recipients),
            recipient_variables_json="{}", accepted_at=start, synthetic=True, domain=self.domain)
        self.messages.append(message)
        count = 0
        for number, address in enumerate(recipients):
            for case in cases:
                for raw in _hostile(case, f"hostile{self.id_prefix}{next(self._seq):x}", address, email_id, message.id,
                                    start + number * 0.001):
                    kind = raw.get("event") if raw.get("event") in KINDS else "delivered"
                    self._insert(_Group(next(self._seq), start + number * 0.001, start + number * 0.001, kind,
                                        raw.get("severity"), message, range(1), raw=raw))
                    count += 1
        return {"message_id": message.id, "events": count}

    # --- lifecycle ---

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        # Mailgun takes 25 MB messages; a batch has up to 1,000 `to` fields plus the others.
        app = web.Application(client_max_size=64 * 1024 * 1024, client_max_fields=MAX_RECIPIENTS * 20)
        app.add_routes([
            web.post("/v3/{domain}/messages", self._post_message),
            web.get("/v3/{domain}/events", self._get_events),
            web.get("/v3/{domain}/events/{token}", self._get_events),
            web.delete("/v3/{domain}/{table:bounces|unsubscribes|complaints}/{address}", self._delete_suppression),
            web.get("/_sim/messages", self._admin_messages),
            web.get("/_sim/stats", self._admin_stats),
            web.get("/_sim/faults", self._admin_faults),
            web.post("/_sim/faults", self._admin_faults),
            web.get("/_sim/rates", self._admin_rates),
            web.post("/_sim/rates", self._admin_rates),
            web.post("/_sim/clock", self._admin_clock),
            web.post("/_sim/reset", self._admin_reset),
            web.get("/_sim/limits", self._admin_limits),
            web.post("/_sim/limits", self._admin_limits),
            web.post("/_sim/domains", self._admin_domains),
            web.post("/_sim/events", self._admin_events),
            web.post("/_sim/hostile", self._admin_hostile),
            web.get("/_sim/follow", self._admin_follow),
            web.post("/_sim/follow", self._admin_follow),
            web.get("/_sim/push", self._admin_push),
            web.post("/_sim/push", self._admin_push),
            web.get("/_sim/push/sent", self._admin_push_sent),
            web.get("/v3/domains/{domain}/webhooks", self._list_webhooks),
            web.get("/v4/domains/{domain}", self._domain_state),
            web.get("/v3/domains/{domain}/webhooks/{id}", self._list_webhooks),
            web.post("/v3/domains/{domain}/webhooks", self._save_webhook),
            web.put("/v3/domains/{domain}/webhooks/{id}", self._save_webhook),
        ])
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        await web.SockSite(self._runner, sock, backlog=1024).start()
        self.base_url = f"http://{host}:{sock.getsockname()[1]}"
        self._push_wake = asyncio.Event()
        self._pusher = asyncio.create_task(self._push_forever())
        return self.base_url

    async def stop(self) -> None:
        if self._pusher is not None:
            self._pusher.cancel()
            self._pusher = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.links.close()

    # --- the Mailgun API ---

    async def _guard(self, request: web.Request, kind: str) -> web.Response | None:
        """Latency, counting, authentication and the domain, in that order."""
        self.request_counts[kind] += 1
        if self.faults.latency_ms:
            await asyncio.sleep(self.faults.latency_ms / 1000)
        if not secrets.compare_digest(request.headers.get("Authorization", "").encode(), self._auth.encode()):
            return web.Response(status=401, text="Forbidden")
        if request.match_info["domain"] not in self.domains:
            return web.json_response({"message": f"Domain not found: {request.match_info['domain']}"}, status=404)
        return None

    def suppress(self, table: str, address: str, domain: str | None = None) -> None:
        """Put an address on a domain's suppression list (bounces, unsubscribes or complaints)."""
        if table not in ("bounces", "unsubscribes", "complaints"):
            raise ValueError(f"unknown suppression list {table!r}")
        self.suppressed[(domain or self.domain, table)].add(address.casefold())

    async def _delete_suppression(self, request: web.Request) -> web.StreamResponse:
        if refusal := await self._guard(request, "suppressions"):
            return refusal
        table, address = request.match_info["table"], request.match_info["address"]
        entries = self.suppressed[(request.match_info["domain"], table)]
        if address.casefold() not in entries:
            return web.json_response({"message": f"Address not found in {table} table"}, status=404)
        entries.discard(address.casefold())
        return web.json_response({"message": f"Address has been removed from {table}", "address": address})

    async def _post_message(self, request: web.Request) -> web.StreamResponse:
        if refusal := await self._guard(request, "messages"):
            return refusal
        form = await request.post()
        try:
            message = self._parse_message(form)
        except _Invalid as error:
            return web.json_response({"message": str(error)}, status=400)
        message.domain = request.match_info["domain"]
        if refusal := self._account_refusal(message):
            return refusal

        faults = self.faults
        roll = self._rng.random() if (faults.error_rate or faults.rate_limit_rate or faults.lost_response_rate
                                      or faults.error_after_accept_rate) else 1.0
        if roll < faults.error_rate:
            return web.json_response({"message": "Internal Server Error"}, status=500)
        roll -= faults.error_rate
        if roll < faults.rate_limit_rate:
            when = math.ceil(time.time() + faults.retry_after_seconds)
            date = format_datetime(datetime.fromtimestamp(when, tz=UTC)).replace("+0000", "UTC")
            return web.json_response({"message": f"Domain {self.domain} is not allowed to send: "
                                                 f"rate limit exceeded, try again after {date}"}, status=429)
        roll -= faults.rate_limit_rate
        self._accept(message)
        if roll < faults.lost_response_rate:
            if request.transport is not None:
                request.transport.abort()  # stored, but the client never hears so
            return web.Response(status=500)
        roll -= faults.lost_response_rate
        if roll < faults.error_after_accept_rate:
            return web.json_response({"message": "Internal Server Error"}, status=500)  # stored all the same
        return web.json_response({"id": f"<{message.id}>", "message": "Queued. Thank you."})

    def _parse_message(self, form: Any) -> StoredMessage:
        def text(name: str) -> str:
            value = form.get(name, "")
            return value if isinstance(value, str) else ""

        if not text("from").strip():
            raise _Invalid("from parameter is missing")
        recipients = _addresses(v for v in form.getall("to", []) if isinstance(v, str))
        if not recipients:
            raise _Invalid("to parameter is missing")
        if not text("subject"):
            raise _Invalid("subject parameter is missing")
        if not text("text") and not text("html"):
            raise _Invalid("Need at least one of 'text' or 'html' parameters specified")
        if any(not _VALID_ADDRESS.match(address) for address in recipients):
            raise _Invalid("'to' parameter is not a valid address. please check documentation")
        if len(recipients) > MAX_RECIPIENTS:
            raise _Invalid(f"Too many recipients: {len(recipients)}, the maximum is {MAX_RECIPIENTS} per message")
        tags = tuple(v for v in form.getall("o:tag", []) if isinstance(v, str))
        if len(tags) > MAX_TAGS:
            raise _Invalid(f"Too many tags: {len(tags)}, the maximum is {MAX_TAGS} per message")
        raw_variables = text("recipient-variables") or "{}"
        try:
            if not isinstance(json.loads(raw_variables), dict):
                raise ValueError
        except ValueError:
            raise _Invalid("recipient-variables parameter is not a valid JSON") from None
        delivery = text("o:deliverytime")
        variables = {k[2:]: v for k, v in form.items() if k.startswith("v:") and isinstance(v, str)}
        headers = {k[2:]: v for k, v in form.items() if k.startswith("h:") and isinstance(v, str)}
        given_id = next((v for k, v in headers.items() if k.lower() == "message-id"), "").strip().strip("<>")
        if self.faults.assign_own_ids:
            given_id = ""
        return StoredMessage(
            id=given_id or f"{time.strftime('%Y%m%d%H%M%S')}.{uuid.uuid4().hex[:16]}@{self.domain}",
            from_address=text("from"), subject=text("subject"), tags=tags, variables=variables,
            headers=headers, recipients=tuple(recipients), recipient_variables_json=raw_variables,
            accepted_at=0.0, delivery_time=_parse_time(delivery, "o:deliverytime") if delivery else None,
            test_mode=text("o:testmode").lower() in ("yes", "true"), html=text("html"), text=text("text"),
            options={k[2:]: v for k, v in form.items() if k.startswith("o:") and k != "o:tag" and isinstance(v, str)})

    def _account_refusal(self, message: StoredMessage) -> web.Response | None:
        """What the account's limits say about this message, as Mailgun words it; None to go on."""
        limits, domain, count = self.limits, message.domain, len(message.recipients)
        if limits.recipient_limit and count > limits.recipient_limit:
            return web.json_response({"message": f"Domain {domain} is not allowed to send: recipient limit exceeded"},
                                     status=420)
        if limits.large_batch_limit and count > limits.large_batch_limit:
            return web.json_response({"message": f"Domain {domain} is not allowed to send large batches yet"},
                                     status=403)
        now = self.now()
        for cap, window in ((limits.hourly_limit, 3600), (limits.daily_limit, 86400)):
            if not cap:
                continue
            start = now - now % window
            sent = sum(len(m.recipients) for m in self.messages
                       if m.domain == domain and not m.synthetic and m.accepted_at >= start)
            if sent + count > cap:
                date = format_datetime(datetime.fromtimestamp(start + window, tz=UTC)).replace("+0000", "UTC")
                period = "hourly" if window == 3600 else "daily"
                return web.json_response({"message": f"Domain {domain} is not allowed to send: {period} sending "
                                                     f"limit exceeded, try again after {date}"}, status=420)
        return None

    def _accept(self, message: StoredMessage) -> None:
        """Store the message and derive every recipient's events from its hash."""
        message.accepted_at = self.now()
        self.messages.append(message)
        rates, faults = self.rates, self.faults
        late_share = faults.late_event_share if faults.late_event_seconds else 0.0
        buckets: dict[tuple[str, str | None, bool], array] = {}

        def put(kind: str, severity: str | None, late_draw: float, index: int) -> None:
            late = late_share > 0 and (late_draw + _KIND_SHIFT[kind]) % 1.0 < late_share
            bucket = buckets.get((kind, severity, late))
            if bucket is None:
                bucket = buckets[(kind, severity, late)] = array("I")
            bucket.append(index)

        failed_temporary = rates.failed_permanent + rates.failed_temporary
        for index, address in enumerate(message.recipients):
            fate, opened, unsubscribed, complained, late_draw = _fates(message.id, address)
            put("accepted", None, late_draw, index)
            if fate < rates.failed_permanent:
                put("failed", "permanent", late_draw, index)
            elif fate < failed_temporary:
                put("failed", "temporary", late_draw, index)
            else:
                put("delivered", None, late_draw, index)
                if self.links.active:
                    self.links.delivered(f"{message.id}\0{address}", message.received_by(address)[1])
                if opened < rates.opened:
                    put("opened", None, late_draw, index)
                if unsubscribed < rates.unsubscribed:
                    put("unsubscribed", None, late_draw, index)
                if complained < rates.complained:
                    put("complained", None, late_draw, index)

        delivered_from = max(message.accepted_at, message.delivery_time or 0.0)
        for (kind, severity, late), members in buckets.items():
            moment = (message.accepted_at if kind == "accepted" else delivered_from) + OFFSETS[kind]
            visible = moment + faults.storage_delay_seconds + (faults.late_event_seconds if late else 0.0)
            self._insert(_Group(next(self._seq), moment, visible, kind, severity, message, members))

    def _insert(self, group: _Group) -> None:
        key = (group.timestamp, group.seq)
        at = bisect.bisect_left(self._keys, key)
        self._keys.insert(at, key)
        self._groups.insert(at, group)
        self._schedule_pushes(group)

    # --- webhooks: pushing events ---

    @staticmethod
    def _webhook_id(group: _Group) -> str | None:
        if group.kind == "failed":
            return "permanent_fail" if group.severity == "permanent" else "temporary_fail"
        return group.kind if group.kind in WEBHOOK_IDS else None

    def _schedule_pushes(self, group: _Group) -> None:
        """Each event of the group, to every URL registered for its kind, when it happens."""
        hooks = self.webhooks.get(group.message.domain or self.domain, {})
        urls = hooks.get(self._webhook_id(group) or "", [])
        if not urls or not self.push.enabled:
            return
        push, rng = self.push, self._rng
        base = time.monotonic() + max(0.0, group.timestamp - self.now()) + push.delay_seconds
        for position in range(len(group.members)):
            copies = 2 if push.duplicate_rate and rng.random() < push.duplicate_rate else 1
            self.push_counts["duplicates"] += copies - 1
            for _ in range(copies):
                for url in urls:
                    due = base + (rng.random() * push.reorder_seconds if push.reorder_seconds else 0.0)
                    heapq.heappush(self._pushes, (due, next(self._push_n), group, position, 0, url))
        self._push_wake.set()

    def _webhook_body(self, group: _Group, position: int) -> bytes:
        """The POST Mailgun sends: the signature and the event as the events API shows it, signed now."""
        push, rng = self.push, self._rng
        stamp = int(time.time()) - (3600 if push.stale_timestamp_rate and rng.random() < push.stale_timestamp_rate
                                    else 0)
        token = secrets.token_hex(25)
        key = self.webhook_signing_key
        if push.wrong_signature_rate and rng.random() < push.wrong_signature_rate:
            key = "not-" + key
        signature = hmac.new(key.encode(), f"{stamp}{token}".encode(), hashlib.sha256).hexdigest()
        item = self._render_items([(group, position)])[1:-1]
        return (f'{{"signature":{{"timestamp":"{stamp}","token":"{token}","signature":"{signature}"}},'
                f'"event-data":{item}}}').encode()

    async def _push_forever(self) -> None:
        slots = asyncio.Semaphore(max(1, int(self.push.concurrency)))
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.push.timeout_seconds)) as session:
            while True:
                now = time.monotonic()
                while self._pushes and self._pushes[0][0] <= now and self.push.enabled:
                    _, _, group, position, attempt, url = heapq.heappop(self._pushes)
                    await slots.acquire()
                    self._in_flight += 1
                    task = asyncio.create_task(self._push_one(session, group, position, attempt, url))
                    task.add_done_callback(lambda _: (slots.release(), self._done_one()))
                    now = time.monotonic()
                self._push_wake.clear()
                wait = min(1.0, self._pushes[0][0] - now) if self._pushes else 1.0
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._push_wake.wait(), max(0.001, wait))

    def _done_one(self) -> None:
        self._in_flight -= 1

    async def _push_one(self, session: aiohttp.ClientSession, group: _Group, position: int, attempt: int,
                        url: str) -> None:
        self.push_counts["pushed"] += 1
        sent = time.time()
        try:
            async with session.post(url, data=self._webhook_body(group, position),
                                    headers={"Content-Type": "application/json"}) as response:
                await response.read()
                status = response.status
        except (TimeoutError, aiohttp.ClientError, OSError):
            status = None
        self.push_counts[f"answered_{status}" if status else "errors"] += 1
        if status == 200 and self.push.record_sends:
            self.sent_at.append(sent)
        if status in (200, 406):
            return  # delivered, or refused for good
        if attempt >= len(RETRY_SCHEDULE):
            self.push_counts["gave_up"] += 1
            return
        self.push_counts["retries"] += 1
        due = time.monotonic() + RETRY_SCHEDULE[attempt] * self.push.retry_scale
        heapq.heappush(self._pushes, (due, next(self._push_n), group, position, attempt + 1, url))
        self._push_wake.set()

    # --- webhooks: the API that registers them ---

    async def _domain_state(self, request: web.Request) -> web.Response:
        """Mailgun's domain API: the domain's state and its sending records, as Mailgun verified them."""
        if refusal := await self._guard(request, "domains"):
            return refusal
        name = request.match_info["domain"]
        verified = name not in self.unverified_domains
        valid = "valid" if verified else "unknown"
        return web.json_response({
            "domain": {"name": name, "state": "active" if verified else "unverified"},
            "sending_dns_records": [
                {"record_type": "TXT", "name": name, "value": "v=spf1 include:mailgun.org ~all", "valid": valid},
                {"record_type": "TXT", "name": f"pic._domainkey.{name}", "value": "k=rsa; p=MIGf...", "valid": valid}]})

    async def _list_webhooks(self, request: web.Request) -> web.Response:
        if refusal := await self._guard(request, "webhooks"):
            return refusal
        hooks = self.webhooks.get(request.match_info["domain"], {})
        kind = request.match_info.get("id")
        if kind is not None:
            if kind not in hooks:
                return web.json_response({"message": "webhook not found"}, status=404)
            return web.json_response({"webhook": {"urls": hooks[kind]}})
        return web.json_response({"webhooks": {k: {"urls": v} for k, v in hooks.items()}})

    async def _save_webhook(self, request: web.Request) -> web.Response:
        if refusal := await self._guard(request, "webhooks"):
            return refusal
        form = await request.post()
        hooks = self.webhooks.setdefault(request.match_info["domain"], {})
        kind = request.match_info.get("id") or form.get("id")
        urls = [u for u in form.getall("url", []) if isinstance(u, str)]
        if kind not in WEBHOOK_IDS:
            return web.json_response({"message": "id parameter is invalid"}, status=400)
        if not urls or len(urls) > 3 or not all(u.startswith(("http://", "https://")) for u in urls):
            return web.json_response({"message": "url parameter is invalid (1 to 3 URLs)"}, status=400)
        creating = request.method == "POST"
        if creating and kind in hooks:
            return web.json_response({"message": "Webhook already exists"}, status=400)
        if not creating and kind not in hooks:
            return web.json_response({"message": "webhook not found"}, status=404)
        hooks[kind] = urls
        return web.json_response({"message": f"Webhook has been {'created' if creating else 'updated'}",
                                  "webhook": {"urls": urls}})

    async def _get_events(self, request: web.Request) -> web.StreamResponse:
        if refusal := await self._guard(request, "events"):
            return refusal
        try:
            token = request.match_info.get("token")
            query, after = self._decode(token) if token else (self._parse_query(request.query), None)
            match = _event_matcher(None if self.faults.ignore_filters else query.event)
        except _Invalid as error:
            return web.json_response({"message": str(error)}, status=400)
        if self.faults.events_error_rate and self._rng.random() < self.faults.events_error_rate:
            return web.json_response({"message": "Internal Server Error"}, status=500)
        if self.faults.malformed_events:
            return web.Response(text='{"items": [{"id": "trunc', content_type="application/json")

        domain = request.match_info["domain"]
        page = self._page(query, after, match, self.now(), domain)
        origin = f"{request.url.origin()}/v3/{domain}/events/"
        last = (page[-1][0], page[-1][1]) if page else None
        first = (page[0][0], page[0][1]) if page else None
        flipped = _Query(query.begin, query.end, not query.ascending, query.limit, query.event, query.message_id,
                         query.recipient, query.tags)
        paging = {
            "next": origin + self._encode(query, _position(last) if last else after),
            "previous": origin + self._encode(flipped, _position(first) if first else after),
            "first": origin + self._encode(query, None),
            "last": origin + self._encode(flipped, None),
        }
        body = f'{{"items":{self._render_items(page)},"paging":{json.dumps(paging)}}}'
        return web.Response(text=body, content_type="application/json")

    def _parse_query(self, params: Any) -> _Query:
        ascending = params.get("ascending", "no").lower()
        if ascending not in ("yes", "no", "true", "false"):
            raise _Invalid("ascending must be yes or no")
        try:
            limit = int(params.get("limit", "300"))
        except ValueError:
            raise _Invalid("limit must be a number") from None
        if not 1 <= limit <= MAX_PAGE:
            raise _Invalid(f"limit must be between 1 and {MAX_PAGE}")
        begin = _parse_time(params["begin"], "begin") if params.get("begin") else None
        end = _parse_time(params["end"], "end") if params.get("end") else None
        up = ascending in ("yes", "true")
        if begin is not None and end is not None and (begin > end if up else begin < end):
            raise _Invalid("begin must come before end when ascending, after it when descending")
        _tags_matcher(params.get("tags"))  # a malformed expression is refused now, as Mailgun does
        return _Query(begin, end, up, limit, params.get("event"), params.get("message-id"), params.get("recipient"),
                      params.get("tags"))

    def _page(self, query: _Query, after: tuple[tuple[float, int], int] | None,
              match: Callable[[str], bool], now: float, domain: str | None = None) -> list[tuple[_Group, int]]:
        """Up to `limit` visible (group, position) pairs after the cursor, in the query's direction."""
        keys, groups, limit = self._keys, self._groups, query.limit
        out: list[tuple[_Group, int]] = []
        message_id, recipient = (None, None) if self.faults.ignore_filters else (query.message_id, query.recipient)
        recipient = recipient.casefold() if recipient else None
        tagged = _tags_matcher(None if self.faults.ignore_filters else query.tags)

        def wanted(group: _Group) -> bool:
            return (group.visible_at <= now and match(group.kind) and tagged(group.message.tags)
                    and (message_id is None or group.message.id == message_id)
                    and (domain is None or group.message.domain in ("", domain)))

        def pick(group: _Group, positions: range, room: int) -> Iterable[int]:
            """Up to `room` positions of the group, in order, that pass the recipient filter."""
            if recipient is None:
                return positions[:room]
            addresses, members = group.message.recipients, group.members
            return itertools.islice((p for p in positions if addresses[members[p]].casefold() == recipient), room)

        if query.ascending:
            low = -math.inf if query.begin is None else query.begin
            high = math.inf if query.end is None else query.end
            if after is None:
                index, position = bisect.bisect_left(keys, (low, -1)), 0
            else:
                index = bisect.bisect_left(keys, after[0])
                position = after[1] + 1 if index < len(keys) and keys[index] == after[0] else 0
            while index < len(groups) and len(out) < limit:
                group = groups[index]
                if group.timestamp >= high or group.timestamp > now:
                    break
                if group.timestamp >= low and wanted(group):
                    out.extend((group, p) for p in pick(group, range(position, len(group.members)), limit - len(out)))
                index, position = index + 1, 0
        else:
            high = math.inf if query.begin is None else query.begin
            low = -math.inf if query.end is None else query.end
            if after is None:
                index, position = bisect.bisect_right(keys, (high, math.inf)) - 1, None
            else:
                index = bisect.bisect_left(keys, after[0])
                if index < len(keys) and keys[index] == after[0]:
                    position = after[1] - 1
                else:
                    index, position = index - 1, None
            while index >= 0 and len(out) < limit:
                group = groups[index]
                if group.timestamp <= low:
                    break
                if group.timestamp <= high and wanted(group):
                    start = len(group.members) - 1 if position is None else position
                    out.extend((group, p) for p in pick(group, range(start, -1, -1), limit - len(out)))
                index, position = index - 1, None
        return out

    def _render_items(self, page: list[tuple[_Group, int]]) -> str:
        """The page's `items` as JSON text, Mailgun's event shape.

        What a group's events share is encoded once per page; each event adds only its id,
        recipient and (when templated) user variables: json.dumps over 300 dicts per page was
        most of a 500,000-event fetch.
        """
        shared: dict[int, tuple[str, str, bool]] = {}
        out = []
        for group, position in page:
            if group.seq not in shared:
                shared[group.seq] = self._shared_fields(group)
            common, sender, templated = shared[group.seq]
            message = group.message
            if group.raw is not None:
                out.append(json.dumps(group.raw))
                continue
            index = group.members[position]
            address = message.recipients[index]
            to = json.dumps(address)
            domain = json.dumps(address.rpartition("@")[2])
            variables = f'"user-variables":{json.dumps(message.user_variables(index))},' if templated else ""
            out.append(f'{{"id":"sim{self.id_prefix}{group.seq:x}x{position:x}","recipient":{to},"recipient-domain":{domain},'
                       f'{variables}'
                       f'"envelope":{{"targets":{to},"sender":{sender},"transport":"smtp"}},'
                       f'"message":{{"headers":{{"to":{to},{common}')
        return "[" + ",".join(out) + "]"

    @staticmethod
    def _shared_fields(group: _Group) -> tuple[str, str, bool]:
        """JSON text closing an event of this group (after the message's "to" header)."""
        message = group.message
        headers = {"message-id": message.id, "from": message.from_address, "subject": message.subject}
        fields: dict[str, Any] = {"event": group.kind, "timestamp": group.timestamp, "log-level": "info",
                                  "tags": list(message.tags), "flags": {"is-test-mode": message.test_mode}}
        if not message._templated:
            fields["user-variables"] = message.variables
        if group.kind == "failed":
            failure = _FAILURES[group.severity or "permanent"]
            fields.update({"log-level": "error" if group.severity == "permanent" else "warn",
                           "severity": group.severity, "reason": failure["reason"],
                           "delivery-status": group.delivery_status or {
                               "code": failure["code"], "enhanced-code": failure["enhanced-code"],
                               "message": failure["message"], "description": ""}})
        elif group.kind == "delivered":
            fields["delivery-status"] = {"code": 250, "message": "OK", "description": ""}
        elif group.kind == "complained":
            fields["log-level"] = "warn"
        common = json.dumps(headers)[1:] + "}," + json.dumps(fields)[1:]
        return common, json.dumps(message.from_address), message._templated

    @staticmethod
    def _encode(query: _Query, after: tuple[tuple[float, int], int] | None) -> str:
        state = {"q": [query.begin, query.end, query.ascending, query.limit, query.event, query.message_id,
                       query.recipient, query.tags],
                 "a": [after[0][0], after[0][1], after[1]] if after else None}
        return base64.urlsafe_b64encode(json.dumps(state, separators=(",", ":")).encode()).decode().rstrip("=")

    @staticmethod
    def _decode(token: str) -> tuple[_Query, tuple[tuple[float, int], int] | None]:
        try:
            state = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            query = _Query(*state["q"])
            after = ((float(state["a"][0]), int(state["a"][1])), int(state["a"][2])) if state["a"] else None
        except (ValueError, KeyError, TypeError, IndexError, binascii.Error):
            raise _Invalid("the paging token is not valid") from None
        return query, after

    # --- admin ---

    async def _admin_messages(self, request: web.Request) -> web.Response:
        email_id = request.query.get("email_id")
        chosen = self.messages_for(email_id) if email_id else [m for m in self.messages if not m.synthetic]
        return web.json_response([m.as_json() for m in chosen])

    async def _admin_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def _admin_faults(self, request: web.Request) -> web.Response:
        return await self._admin_update(request, self.set_faults, lambda: asdict(self.faults))

    async def _admin_rates(self, request: web.Request) -> web.Response:
        return await self._admin_update(request, self.set_rates, lambda: asdict(self.rates))

    async def _admin_update(self, request: web.Request, apply: Callable[..., None],
                            show: Callable[[], dict]) -> web.Response:
        if request.method == "GET":
            return web.json_response(show())
        try:
            changes = await request.json()
            if not isinstance(changes, dict):
                raise ValueError("send a JSON object")
            apply(**changes)
        except ValueError as error:
            return web.json_response({"message": str(error)}, status=400)
        return web.json_response(show())

    async def _admin_follow(self, request: web.Request) -> web.Response:
        return await self._admin_update(request, lambda **changes: self.links.following.update(changes),
                                        self.links.stats)

    async def _admin_limits(self, request: web.Request) -> web.Response:
        return await self._admin_update(request, self.set_limits, lambda: asdict(self.limits))

    async def _admin_domains(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            self.add_domain(body.get("domain", "") if isinstance(body, dict) else "")
        except ValueError as error:
            return web.json_response({"message": str(error)}, status=400)
        return web.json_response({"domains": sorted(self.domains)})

    async def _admin_clock(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.advance(float(body.get("advance", 0)))
        return web.json_response({"now": self.now()})

    async def _admin_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"message": "reset"})

    async def _admin_push(self, request: web.Request) -> web.Response:
        return await self._admin_update(request, self.set_push, lambda: {**asdict(self.push), **self.push_stats()})

    async def _admin_push_sent(self, request: web.Request) -> web.Response:
        return web.json_response(sorted(self.sent_at))

    async def _admin_hostile(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("send a JSON object")
            return web.json_response(self.add_hostile_events(**body))
        except (ValueError, TypeError) as error:
            return web.json_response({"message": str(error)}, status=400)

    async def _admin_events(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("send a JSON object")
            return web.json_response(self.add_synthetic_events(**body))
        except (ValueError, TypeError) as error:
            return web.json_response({"message": str(error)}, status=400)


def _hostile(case: str, event_id: str, address: str, email_id: str, message_id: str,
             moment: float) -> list[dict[str, Any]]:
    """The raw events of one hostile case for one recipient."""
    base = {"id": event_id, "event": "delivered", "timestamp": moment, "recipient": address,
            "user-variables": {"email-id": email_id}, "message": {"headers": {"message-id": message_id}},
            "delivery-status": {"code": 250, "message": "OK"}}
    if case == "nul-recipient":
        return [{**base, "recipient": address.replace("@", "\x00@", 1)}]
    if case == "surrogate-recipient":
        return [{**base, "recipient": "\ud800" + address}]
    if case == "huge-code":
        return [{**base, "event": "failed", "severity": "permanent",
                 "delivery-status": {"code": 2**40, "message": "5.1.1 no such mailbox"}}]
    if case == "no-id":
        return [{key: value for key, value in base.items() if key != "id"}]
    if case == "huge-nested":
        nested: Any = "deep"
        for _ in range(50):
            nested = {"next": nested, "padding": "x" * 1000}
        return [{**base, "user-variables": {"email-id": email_id, "extra": nested}}]
    if case == "bad-timestamp":
        return [{**base, "timestamp": "yesterday"}]
    # repeated-id: the same open twice, and a second event reusing its id
    opened = {**base, "event": "opened"}
    return [opened, dict(opened), {**opened, "event": "delivered"}]


def _position(entry: tuple[_Group, int]) -> tuple[tuple[float, int], int]:
    group, position = entry
    return (group.timestamp, group.seq), position


@asynccontextmanager
async def running_simulator(*, api_key: str = "key-simulator", domain: str = "mg.simulator.test",
                            seed: int = 0, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[MailgunSimulator]:
    """A simulator serving on a free port for the duration of the block."""
    simulator = MailgunSimulator(api_key=api_key, domain=domain, seed=seed)
    await simulator.start(host, port)
    try:
        yield simulator
    finally:
        await simulator.stop()


API_KEY_VARIABLE = "MAILGUN_SIMULATOR_API_KEY"


async def _serve(args: argparse.Namespace) -> None:
    # The signing key from the environment, never the command line (other local users read that).
    simulator = MailgunSimulator(api_key=args.api_key, domain=args.domain, seed=args.seed,
                                 webhook_signing_key=os.environ.get("MAILGUN_WEBHOOK_SIGNING_KEY")
                                 or secrets.token_hex(16))
    url = await simulator.start(args.host, args.port)
    print(f"Mailgun simulator for {args.domain} on {url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, stop.set)
    await stop.wait()
    await simulator.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devstack.mailgun_simulator",
                                     description="A local Mailgun (messages and events API) for development.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--domain", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # The key comes from the environment: a command line is readable by every local account.
    args.api_key = os.environ.get(API_KEY_VARIABLE, "")
    if not args.api_key:
        parser.error(f"{API_KEY_VARIABLE} is not set: the API key the simulator accepts")
    asyncio.run(_serve(args))


if __name__ == "__main__":
    main()

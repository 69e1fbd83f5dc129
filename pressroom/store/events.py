"""A batch of delivery events: those to apply, those set aside with their reason, counts by type."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pressroom.delivery_events import APPLIED_KINDS, RECORDED_KINDS, DeliveryEvent, EventRejected

RAW_LIMIT = 65536  # characters of a rejected event kept for an operator to read
Source = Literal["poll", "push"]
Parse = Callable[[Any], "DeliveryEvent | EventRejected"]  # the provider's parser (EmailProvider.parse_event)
# json.dumps with options makes an encoder per call: a quarter of its time for one event.
_RAW_ENCODER = json.JSONEncoder(ensure_ascii=True, default=repr)

# What a row written into webhook_inbox NOTIFYs: WebhookInboxWorkflow's activity wakes on it.
INBOX_CHANNEL = "pressroom_webhook_inbox"


def raw_text(item: Any) -> str:
    """The event as JSON text an operator can read and PostgreSQL can store (NUL and lone surrogates
    escaped as \\u0000 …), whatever it holds."""
    try:
        return _RAW_ENCODER.encode(item)
    except (RecursionError, ValueError, TypeError):
        return json.dumps(repr(item)[:RAW_LIMIT])


@dataclass(slots=True)
class SetAside:
    rejection: EventRejected
    raw: str


@dataclass
class EventBatch:
    """Events to apply (only the kinds that change something), those set aside, and counts by type."""

    events: list[DeliveryEvent] = field(default_factory=list)
    rejected: list[SetAside] = field(default_factory=list)
    by_type: Counter[str] = field(default_factory=Counter)

    def __len__(self) -> int:
        return len(self.events)

    @property
    def malformed(self) -> int:
        return len(self.rejected)

    def add(self, items: Iterable[Any], parse: Parse) -> None:
        for item in items:
            self.add_one(item, parse)

    def add_one(self, item: Any, parse: Parse, raw: str | None = None) -> None:
        parsed = parse(item)
        if isinstance(parsed, EventRejected):
            self.rejected.append(SetAside(parsed, raw if raw is not None else raw_text(item)))
            return
        self.by_type[parsed.name] += 1
        if parsed.kind in APPLIED_KINDS:
            self.events.append(parsed)

    def halves(self) -> tuple[EventBatch, EventBatch]:
        middle = len(self.events) // 2
        return EventBatch(self.events[:middle]), EventBatch(self.events[middle:])

    def time_columns(self) -> tuple[list, ...]:
        events = self.events
        return ([e.kind for e in events], [e.timestamp for e in events], [e.email_id for e in events],
                [e.provider_message_id for e in events], [e.recipient for e in events])

    def records(self) -> tuple[list, ...] | None:
        """Failures, unsubscribes and complaints as columns for one unnest, or None: most batches hold none."""
        recorded = [e for e in self.events if e.kind in RECORDED_KINDS]
        if not recorded:
            return None
        return ([e.event_id for e in recorded], [e.kind for e in recorded], [e.severity for e in recorded],
                [e.timestamp for e in recorded], [e.email_id for e in recorded],
                [e.provider_message_id for e in recorded], [e.recipient for e in recorded],
                [e.code for e in recorded], [e.enhanced_code for e in recorded], [e.message for e in recorded])

    def rejected_columns(self, source: Source) -> tuple[list, ...]:
        aside = self.rejected
        return ([a.rejection.provider for a in aside], [source] * len(aside), [a.rejection.event_id for a in aside],
                [a.rejection.reason for a in aside], [a.raw[:RAW_LIMIT] for a in aside],
                [hashlib.sha256(a.raw.encode()).hexdigest() for a in aside])


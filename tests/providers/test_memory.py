"""The in-memory provider's own switches, beyond the contract both implementations share
(tests/providers/test_port.py): every event read twice, counted switches used up, the sent copies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pressroom.providers.memory import MemoryProvider
from pressroom.providers.port import EventQuery, Message, ProviderRateLimited, placeholder

MESSAGE = Message(from_address="news@example.com", subject=f"Hi {placeholder('name')}", html="<p>x</p>", text="x")


def window(provider: MemoryProvider) -> EventQuery:
    now = datetime.fromtimestamp(provider.now(), tz=UTC)
    return EventQuery(begin=now - timedelta(minutes=1), end=now + timedelta(seconds=1), names=("delivered",))


async def test_duplicated_events_are_each_read_twice_and_parse_to_the_same_event():
    provider = MemoryProvider()
    provider.faults.duplicate_events = True
    await provider.send(provider.prepare(MESSAGE), {"a@example.com": {"name": "A"}}, mark={"email-id": "e1"})
    page = await provider.read_events(None, window(provider))
    events = [provider.parse_event(item) for item in page.items]
    assert len(events) == 2 and events[0] == events[1] and events[0].email_id == "e1"


async def test_a_counted_switch_is_used_up_by_the_sends_it_refuses():
    provider = MemoryProvider()
    provider.faults.rate_limited = 1
    with pytest.raises(ProviderRateLimited):
        await provider.send(provider.prepare(MESSAGE), {"a@example.com": {"name": "A"}}, mark={})
    assert await provider.send(provider.prepare(MESSAGE), {"a@example.com": {"name": "A"}}, mark={})
    assert [sent.personalised("a@example.com")[0] for sent in provider.sent] == ["Hi A"]


def test_an_event_that_is_not_ours_is_set_aside_with_a_reason():
    provider = MemoryProvider()
    rejected = provider.parse_event({"id": "x", "kind": "opened"})
    assert rejected.provider == "memory" and rejected.event_id == "x" and rejected.reason

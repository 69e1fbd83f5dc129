"""Poison never stops a pipeline: hostile events from the simulator are set aside with their reason,
the cursor moves on, later events apply, and every event seen again is a no-op. End to end: the
simulator over HTTP, the real workflow on the dev server, real PostgreSQL."""

from __future__ import annotations

from datetime import UTC

from devstack.mailgun_simulator import HOSTILE_CASES
from operations.analytics import rejected_events
from pressroom.providers.mailgun import parse_event

from .conftest import address, seed_newsletter, sim_now
from .test_fetch import run_fetch

SET_ASIDE = {"nul-recipient", "surrogate-recipient", "huge-code", "no-id", "huge-nested", "bad-timestamp"}


async def test_hostile_events_are_set_aside_and_the_good_ones_after_them_apply(dev_env, db, mailgun,
                                                                               analytics_settings):
    await seed_newsletter(db, members=3, emails=1)
    base = mailgun.now() - 600
    mailgun.add_hostile_events(email_id="e0", recipients=[address(0)], cases=HOSTILE_CASES, timestamp=base)
    mailgun.add_synthetic_events(email_id="e0", recipients=[address(n) for n in range(3)], timestamp=base + 10,
                                 events=["delivered", "failed"])
    mailgun.advance(30)

    result = await run_fetch(dev_env, analytics_settings, sim_now(mailgun))
    assert result.error is None and result.aggregate is not None
    malformed = sum(p.malformed for p in result.phases)
    assert malformed == len(SET_ASIDE)
    assert await db.fetchval("SELECT delivered_count FROM emails WHERE id = 'e0'") == 3
    assert await db.fetchval("SELECT opened_count FROM emails WHERE id = 'e0'") == 1  # the repeated open, once
    assert await db.fetchval("SELECT count(*) FROM email_recipient_failures") == 3
    latest = await db.fetchval("SELECT metadata->>'cursor' FROM jobs WHERE name = 'email-analytics-latest'")
    assert float(latest) >= base + 11  # past the poison and the good events after it

    rows = await db.fetch("SELECT source, reason, event_id, event FROM delivery_events_rejected ORDER BY id")
    reasons = " | ".join(r["reason"] for r in rows)
    for words in ("recipient holds a control", "beyond a 32-bit", "id is missing", "nested too deep",
                  "timestamp is missing"):
        assert words in reasons
    assert all(r["source"] == "poll" for r in rows) and len(rows) == len(SET_ASIDE)
    assert all("\x00" not in r["event"] for r in rows)  # stored escaped, readable

    # Read again (a backfill of the same window): nothing new is set aside, nothing changes.
    from datetime import datetime

    from operations.analytics import analytics_backfill
    await analytics_backfill(datetime.fromtimestamp(base - 5, UTC).isoformat(),
                             datetime.fromtimestamp(base + 20, UTC).isoformat(), analytics_settings)
    again = await run_fetch(dev_env, analytics_settings, sim_now(mailgun))
    assert again.error is None
    assert await db.fetchval("SELECT count(*) FROM delivery_events_rejected") == len(SET_ASIDE)
    assert await db.fetchval("SELECT delivered_count FROM emails WHERE id = 'e0'") == 3

    listed = await rejected_events(analytics_settings)
    assert listed["total"] == len(SET_ASIDE) and len(listed["events"]) == len(SET_ASIDE)
    assert all("@" not in str(entry) for entry in listed["events"])  # ids and reasons, never the event

    from tests.operations.test_waiting import cli, cli_env
    code, out, err = await cli("analytics", "rejected", env=cli_env(analytics_settings, dev_env))
    assert code == 0, err
    assert f"{len(SET_ASIDE)} events set aside" in out and "beyond a 32-bit" in out and "example.com" not in out


async def test_an_event_id_already_stored_does_not_stop_the_run(dev_env, db, mailgun, analytics_settings):
    """`dev down` / `dev up`: a restarted provider reused an id a failure row already holds."""
    await seed_newsletter(db, members=3, emails=1)
    base = mailgun.now() - 600
    mailgun.add_synthetic_events(email_id="e0", recipients=[address(2)], timestamp=base, events=["failed"])
    mailgun.advance(30)
    await run_fetch(dev_env, analytics_settings, sim_now(mailgun))
    stored = await db.fetchval("SELECT event_id FROM email_recipient_failures")
    # The next events carry the same id, for another recipient.
    mailgun.add_hostile_events(email_id="e0", recipients=[address(1)], cases=["repeated-id"],
                               timestamp=mailgun.now() + 1)
    for group in mailgun._groups:
        if group.raw is not None:
            group.raw.update({"id": stored, "event": "failed", "severity": "permanent",
                              "delivery-status": {"code": 550, "message": "gone"}})
    mailgun.advance(30)
    result = await run_fetch(dev_env, analytics_settings, sim_now(mailgun))
    assert result.error is None
    rows = await db.fetch("SELECT er.member_id, f.event_id FROM email_recipient_failures f "
                          "JOIN email_recipients er ON er.id = f.email_recipient_id ORDER BY 1")
    assert [tuple(r) for r in rows] == [("m1", stored), ("m2", stored)]


def test_the_parser_rejects_each_case_with_one_line_and_never_raises():
    good = {"id": "a1", "event": "failed", "severity": "permanent", "timestamp": 1_700_000_000.0,
            "recipient": "x@example.com", "user-variables": {"email-id": "e0"},
            "delivery-status": {"code": 550, "enhanced-code": "5.1.1", "message": "gone\x07 away"}}
    event = parse_event(good)
    assert event.kind == "failed-permanent" and event.code == 550 and event.message == "gone  away"
    cases = {
        "recipient": {**good, "recipient": "x\x00@example.com"},
        "32-bit": {**good, "delivery-status": {"code": 2**31}},
        "not an integer": {**good, "delivery-status": {"code": True}},
        "id is missing": {k: v for k, v in good.items() if k != "id"},
        "neither an email": {**good, "user-variables": {}},
        "timestamp": {**good, "timestamp": float("nan")},
        "not a JSON object": ["a list"],
        "longer than": {**good, "recipient": "x" * 600},
        "NUL byte": {**good, "delivery-status": {"code": 550, "message": "a\x00b"}},
        "nested too deep": {**good, "user-variables": {"email-id": "e0", "x": [[[[[[["deep"]]]]]]]}},
    }
    for words, item in cases.items():
        rejected = parse_event(item)
        assert type(rejected).__name__ == "EventRejected", words
        assert words in rejected.reason and "\n" not in rejected.reason and "example.com" not in rejected.reason

"""Applying a batch: first times win, every matched event is counted and marked, re-reads change nothing."""

from __future__ import annotations

from datetime import UTC, datetime

from activities.analytics import window
from activities.analytics.models import PhaseResult
from pressroom.providers.mailgun import parse_event
from pressroom.store.events import EventBatch

from .conftest import activities_for, address, seed_newsletter

T0 = 1_700_000_000.0


def event(n: int, kind: str, at: float, **extra) -> dict:
    """A Mailgun event for member n of email e0 (or of no email we know, with `email_id=None`)."""
    email_id = extra.pop("email_id", "e0")
    variables = {"email-id": email_id} if email_id else {}
    return {"id": f"{kind}-{n}-{at}", "event": kind, "timestamp": at, "recipient": extra.pop("to", address(n)),
            "user-variables": variables, "message": {"headers": {"message-id": extra.pop("message_id", "<x@mg>")}},
            **extra}


def failed(n: int, at: float, severity: str, code: int) -> dict:
    return event(n, "failed", at, severity=severity,
                 **{"delivery-status": {"code": code, "message": "No such mailbox", "description": ""}})


async def apply(activities, items: list[dict]) -> PhaseResult:
    batch, result = EventBatch(), PhaseResult(phase="latest")
    batch.add(items, parse_event)
    await window.apply(activities.deps.pool, batch, result, "email-analytics-test", {"cursor": T0})
    return result


async def times(db) -> dict[str, tuple]:
    rows = await db.fetch("SELECT member_id, delivered_at, opened_at, failed_at FROM email_recipients")
    return {r["member_id"]: (r["delivered_at"], r["opened_at"], r["failed_at"]) for r in rows}


async def dirty(db) -> tuple[set, set]:
    emails = {r[0] for r in await db.fetch("SELECT email_id FROM email_analytics_dirty_emails")}
    members = {r[0] for r in await db.fetch("SELECT member_id FROM email_analytics_dirty_members")}
    return emails, members


def at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


async def test_a_batch_sets_first_times_and_counts_every_matched_event_once(db, client, analytics_settings):
    await seed_newsletter(db, members=6, emails=1)
    await db.execute("UPDATE email_batches SET provider_id = 'p0@mg' WHERE email_id = 'e0'")
    activities = activities_for(analytics_settings, db, client)
    items = [event(0, "delivered", T0), event(0, "opened", T0 + 10), event(0, "opened", T0 + 5),
             failed(1, T0, "temporary", 421), failed(2, T0, "permanent", 550),
             event(3, "delivered", T0, email_id=None, message_id="<p0@mg>"),  # found by its message id
             event(4, "unsubscribed", T0),
             event(9, "delivered", T0, to="nobody@example.com"),  # not a recipient of e0
             event(5, "delivered", T0, email_id="e-unknown")]
    result = await apply(activities, items)
    assert (result.applied, result.unknown) == (7, 2)
    assert await times(db) == {
        "m0": (at(T0), at(T0 + 5), None), "m1": (None, None, None), "m2": (None, None, at(T0)),
        "m3": (at(T0), None, None), "m4": (None, None, None), "m5": (None, None, None)}
    # Every member with a matched event is recounted, also when no time changed (m1, m4).
    assert await dirty(db) == ({"e0"}, {"m0", "m1", "m2", "m3", "m4"})
    failures = await db.fetch("SELECT member_id, severity FROM email_recipient_failures ORDER BY member_id")
    assert [tuple(r) for r in failures] == [("m1", "temporary"), ("m2", "permanent")]
    assert await db.fetchval("SELECT count(*) FROM suppressions WHERE email = $1", address(2)) == 1
    assert await db.fetchval("SELECT count(*) FROM members_newsletters WHERE member_id = 'm4'") == 0

    # The same events read again, later copies of them, and one new open: only the open changes a
    # row; every matched event is counted and its member marked again.
    before = await times(db)
    await db.execute("TRUNCATE email_analytics_dirty_emails, email_analytics_dirty_members")
    again = [{**item, "id": item["id"] + "-again"} for item in items] + [event(3, "opened", T0 + 60)]
    again += [event(0, "opened", T0 + 1000), event(2, "delivered", T0 + 1000)]
    result = await apply(activities, again)
    assert (result.applied, result.unknown) == (10, 2)
    after = await times(db)
    assert after == {**before, "m3": (at(T0), at(T0 + 60), None), "m2": (at(T0 + 1000), None, at(T0))}
    assert await dirty(db) == ({"e0"}, {"m0", "m1", "m2", "m3", "m4"})


async def test_a_batch_of_new_events_marks_exactly_the_rows_it_changed(db, client, analytics_settings):
    await seed_newsletter(db, members=5, emails=2)
    activities = activities_for(analytics_settings, db, client)
    result = await apply(activities, [event(0, "delivered", T0), event(1, "opened", T0),
                                      event(2, "delivered", T0, email_id="e1")])
    assert (result.applied, result.unknown) == (3, 0)
    assert await dirty(db) == ({"e0", "e1"}, {"m0", "m1", "m2"})
    rows = await db.fetch("SELECT email_id, member_id FROM email_recipients "
                          "WHERE delivered_at IS NOT NULL OR opened_at IS NOT NULL ORDER BY 1, 2")
    assert [tuple(r) for r in rows] == [("e0", "m0"), ("e0", "m1"), ("e1", "m2")]


async def test_pages_are_read_while_a_batch_is_applied_and_checkpoints_hold_the_figures_at_its_cut(
        db, mailgun, client, analytics_settings, monkeypatch):
    import asyncio

    from temporalio.testing import ActivityEnvironment

    from activities.analytics.models import FetchPhaseInput

    from .conftest import sim_now

    await seed_newsletter(db, members=4500, emails=1)
    mailgun.add_synthetic_events(email_id="e0", recipients=[address(n) for n in range(4500)], events=["delivered"])
    activities = activities_for(analytics_settings, db, client)
    requests_during: list[tuple[int, int]] = []
    apply = window.apply

    async def slow_apply(*args):
        before = mailgun.request_counts["events"]
        await asyncio.sleep(0.5)  # a slow database: the next pages should arrive meanwhile
        await apply(*args)
        requests_during.append((before, mailgun.request_counts["events"]))

    monkeypatch.setattr(window, "apply", slow_apply)
    env = ActivityEnvironment()
    heartbeats = []
    env.on_heartbeat = lambda *details: heartbeats.append(details[0])
    result = await env.run(activities.fetch_phase, FetchPhaseInput(phase="latest", now=sim_now(mailgun)))

    assert result.events == 4500 and result.applied == 4500 and result.pages == 16
    first_before, first_after = requests_during[0]
    assert first_after - first_before >= 3  # pages were read while the first batch was applied
    checkpoints = [h for h in heartbeats if h is not None]
    # The first checkpoint is the first batch's: 10 pages, 3,000 events, though more were read.
    assert checkpoints[0]["result"]["pages"] == 10 and checkpoints[0]["result"]["events"] == 3000
    assert checkpoints[0]["result"]["applied"] == 3000
    assert await db.fetchval("SELECT count(delivered_at) FROM email_recipients") == 4500


async def test_an_event_postgresql_refuses_is_found_by_halving_and_set_aside_alone(db, client, analytics_settings):
    """The parser lets nothing through that PostgreSQL refuses; should one slip by, it is found and
    set aside, and the events around it and the cursor are applied all the same."""
    from pressroom.delivery_events import DeliveryEvent

    await seed_newsletter(db, members=6, emails=1)
    activities = activities_for(analytics_settings, db, client)
    batch, result = EventBatch(), PhaseResult(phase="latest")
    batch.add([failed(n, T0, "permanent", 550) for n in range(6)], parse_event)
    bad = batch.events[3]
    batch.events[3] = DeliveryEvent.model_construct(**{**dict(bad), "code": 2**40})  # past the parser's check
    await window.apply(activities.deps.pool, batch, result, "email-analytics-test", {"cursor": T0 + 1})
    assert (result.applied, result.malformed) == (5, 1)
    assert await db.fetchval("SELECT count(*) FROM email_recipient_failures") == 5
    reason = await db.fetchval("SELECT reason FROM delivery_events_rejected")
    assert reason.startswith("PostgreSQL refused it (22")
    saved = await db.fetchval("SELECT metadata->>'cursor' FROM jobs WHERE name = 'email-analytics-test'")
    assert float(saved) == T0 + 1


async def test_one_recipients_events_in_a_page_are_one_write_first_wins_as_applied_one_by_one(
        db, client, analytics_settings):
    """A page's delivered, opened and failed events of one recipient fold into one row write; the
    first time of each kind wins, and the result is the one the same events give one by one, in
    the opposite order (e0 takes them as one page, e1 one event a page)."""
    from activities.delivery_events.aggregates import aggregate
    from activities.delivery_events.apply import _apply_events

    await seed_newsletter(db, members=4, emails=2)
    activities = activities_for(analytics_settings, db, client)

    def page(email_id: str) -> list[dict]:
        return [event(0, "delivered", T0 + 3, email_id=email_id), event(0, "opened", T0 + 20, email_id=email_id),
                event(0, "delivered", T0 + 1, email_id=email_id), event(0, "opened", T0 + 10, email_id=email_id),
                {**failed(0, T0 + 30, "permanent", 550), "user-variables": {"email-id": email_id}},
                {**failed(0, T0 + 25, "temporary", 421), "user-variables": {"email-id": email_id}},
                {**failed(0, T0 + 28, "permanent", 551), "user-variables": {"email-id": email_id}},
                event(1, "opened", T0 + 7, email_id=email_id), event(1, "delivered", T0 + 2, email_id=email_id),
                event(2, "delivered", T0 + 5, email_id=email_id), event(2, "delivered", T0 + 4, email_id=email_id),
                {**failed(3, T0 + 1, "temporary", 421), "user-variables": {"email-id": email_id}},
                {**failed(3, T0 + 9, "temporary", 452), "user-variables": {"email-id": email_id}}]

    batch = EventBatch()
    batch.add(page("e0"), parse_event)
    updated = "SELECT pg_stat_get_xact_tuples_updated('email_recipients'::regclass)"
    async with db.acquire() as conn, conn.transaction():
        before = await conn.fetchval(updated)  # the session's counts not yet reported, then this transaction's
        assert await _apply_events(conn, batch) == 13
        writes = await conn.fetchval(updated) - before
    assert writes == 3  # m0, m1, m2: one write each for 11 events; m3's temporary failures set no time
    for item in reversed(page("e1")):
        await apply(activities, [item])

    rows = await db.fetch("SELECT email_id, member_id, delivered_at, opened_at, failed_at FROM email_recipients")
    by_email = {(r["email_id"], r["member_id"]): (r["delivered_at"], r["opened_at"], r["failed_at"]) for r in rows}
    assert {m: by_email["e0", m] for m in ("m0", "m1", "m2", "m3")} == {
        "m0": (at(T0 + 1), at(T0 + 10), at(T0 + 28)), "m1": (at(T0 + 2), at(T0 + 7), None),
        "m2": (at(T0 + 4), None, None), "m3": (None, None, None)}
    assert all(by_email["e0", m] == by_email["e1", m] for m in ("m0", "m1", "m2", "m3"))
    failures = await db.fetch("SELECT email_id, member_id, severity, code, failed_at FROM email_recipient_failures")
    stood = {(r["email_id"], r["member_id"]): (r["severity"], r["code"], r["failed_at"]) for r in failures}
    assert stood["e0", "m0"] == ("permanent", 551, at(T0 + 28)) and stood["e0", "m3"] == ("temporary", 452, at(T0 + 9))
    assert {m: stood["e0", m] for m in ("m0", "m3")} == {m: stood["e1", m] for m in ("m0", "m3")}
    async with db.acquire() as conn, conn.transaction():
        await aggregate(conn)
    counts = await db.fetch("SELECT id, delivered_count, opened_count, failed_count FROM emails ORDER BY id")
    assert [tuple(r)[1:] for r in counts] == [(3, 2, 1), (3, 2, 1)]


async def test_a_recount_that_finds_a_members_figures_unchanged_does_not_rewrite_the_member(
        db, client, analytics_settings):
    """Members are recounted exactly as before; only those whose figures changed are written."""
    from activities.delivery_events.aggregates import aggregate

    await seed_newsletter(db, members=3, emails=1)
    activities = activities_for(analytics_settings, db, client)
    await apply(activities, [event(0, "delivered", T0), event(1, "opened", T0)])
    async with db.acquire() as conn, conn.transaction():
        assert await aggregate(conn) == (1, 2)
    figures = "SELECT id, email_count, email_opened_count, email_open_rate, updated_at FROM members ORDER BY id"
    first = [tuple(r) for r in await db.fetch(figures)]
    # The same events read again mark both members; their figures come out as stored: nothing written.
    await apply(activities, [event(0, "delivered", T0 + 5), event(1, "opened", T0 + 5)])
    async with db.acquire() as conn, conn.transaction():
        assert await aggregate(conn) == (1, 0)
    assert [tuple(r) for r in await db.fetch(figures)] == first
    assert [r[1:4] for r in first] == [(1, 0, None), (1, 1, None), (0, 0, None)]
    # A new open of m0 changes its figures: it alone is written.
    await apply(activities, [event(0, "opened", T0 + 9)])
    async with db.acquire() as conn, conn.transaction():
        assert await aggregate(conn) == (1, 1)
    assert await db.fetchval("SELECT email_opened_count FROM members WHERE id = 'm0'") == 1


async def test_a_send_a_delivery_an_open_and_a_recount_stay_on_their_pages(db, client, analytics_settings):
    """A recipient row updated by its send (processed_at), by a delivery or by an open, and a member
    row by the recount, stay on their page (a HOT update: no row version moves, no index is
    written): the tables leave room for it (schema 0021), and no index covers those columns (schema
    0023: an index on opened_at would move every open). A new version is a few bytes longer than
    the old (a time where there was none), so a page's last rows may move: the open, the second
    update of those rows, keeps about 88% of them in place, the others about 97%."""
    from activities.delivery_events.aggregates import aggregate
    from activities.delivery_events.apply import _apply_events
    from activities.newsletter.batch_outcome import record_submitted

    await seed_newsletter(db, members=300, emails=2)
    delivered, opened = EventBatch(), EventBatch()
    delivered.add([event(n, "delivered", T0 + n, email_id="e1") for n in range(300)], parse_event)
    opened.add([event(n, "opened", T0 + n + 5, email_id="e1") for n in range(300)], parse_event)

    async def in_place(table: str, step) -> float:
        """The share of `table`'s rows updated by `step`, in one transaction, that stayed on their page."""
        counted = (f"SELECT pg_stat_get_xact_tuples_updated('{table}'::regclass), "
                   f"pg_stat_get_xact_tuples_hot_updated('{table}'::regclass)")
        async with db.acquire() as conn, conn.transaction():
            before = await conn.fetchrow(counted)
            await step(conn)
            after = await conn.fetchrow(counted)
        updated, hot = after[0] - before[0], after[1] - before[1]
        assert updated == 300
        return hot / updated

    assert await in_place("email_recipients", lambda conn: record_submitted(conn, "e0-b0", "id-0")) > 0.95
    assert await in_place("email_recipients", lambda conn: _apply_events(conn, delivered)) > 0.95
    assert await in_place("email_recipients", lambda conn: _apply_events(conn, opened)) > 0.8
    assert await in_place("members", aggregate) > 0.95


async def test_events_from_before_a_resubscribe_read_again_leave_the_member_subscribed(db, client,
                                                                                       analytics_settings):
    """`members resubscribe` lifts an unsubscribe, a complaint and a bounce. The same events read
    again later (a window read again, a push of an event already polled) change nothing; newer ones
    apply as before."""
    from operations.members import resubscribe_member

    async def subscribed() -> set[str]:
        return {r[0] for r in await db.fetch("SELECT member_id FROM members_newsletters")}

    async def suppressed() -> set[str]:
        return {r[0] for r in await db.fetch("SELECT email FROM suppressions")}

    await seed_newsletter(db, members=3, emails=1)
    activities = activities_for(analytics_settings, db, client)
    old = [event(0, "unsubscribed", T0), event(1, "complained", T0), failed(2, T0, "permanent", 550)]
    await apply(activities, old)
    assert await subscribed() == {"m1", "m2"} and await suppressed() == {address(1), address(2)}

    await db.execute("INSERT INTO members_newsletters (member_id, newsletter_id) VALUES ('m0', 'nl1')")  # the site
    for member in ("m0", "m1", "m2"):
        await resubscribe_member(member, settings=analytics_settings)
    assert await suppressed() == set()

    await apply(activities, [{**item, "id": item["id"] + "-again"} for item in old])
    assert await subscribed() == {"m0", "m1", "m2"} and await suppressed() == set()

    later = await db.fetchval("SELECT extract(epoch FROM max(resubscribed_at))::float8 FROM members") + 1
    await apply(activities, [event(0, "unsubscribed", later), event(1, "complained", later)])
    assert await subscribed() == {"m1", "m2"} and await suppressed() == {address(1)}

"""`newsletter report` reads what was recorded when it happened (who was left out, counted when the
batches were written; who left through the email as their events were applied; the first and last
open kept by the recount) and answers as the report computed from the rows did, on the same data."""

from __future__ import annotations

import time

import pytest
from temporalio.testing import ActivityEnvironment

from activities.delivery_events.aggregates import aggregate
from activities.delivery_events.apply import apply_batch
from activities.newsletter.batches import BatchCreationActivities
from activities.newsletter.models import CreateBatchesInput
from operations.answers import EmailReport
from operations.reports import newsletter_report
from pressroom.delivery_events import DeliveryEvent
from pressroom.dependencies import Dependencies
from pressroom.store.events import EventBatch
from tests.conftest import make_settings
from tests.newsletter.conftest import seed_email
from tests.operations.report_before_0029 import report_before_0029

SEGMENTED = '<p data-gh-segment="status:free">Upgrade?</p><p>Hello %recipient.name%</p>'


def event(email_id: str, kind: str, address: str, at: float, n: int, **extra) -> DeliveryEvent:
    name = {"failed-permanent": "failed", "failed-temporary": "failed"}.get(kind, kind)
    return DeliveryEvent(provider="mailgun", event_id=f"{kind}-{n}-{at}", kind=kind, name=name, timestamp=at,
                         recipient=address, email_id=email_id, **extra)



def as_computed(answer: EmailReport) -> dict:
    """The report less what was added after 0029 and is not in the oracle: who cancelled the send and
    when (stored facts), the clicks (none here), and the reputation rates (read from the same figures,
    checked here)."""
    report = answer.model_dump()
    assert (report.pop("cancelled_by"), report.pop("cancelled_at")) == (None, None)
    clicks = report.pop("clicks")  # none in this test: the oracle has no clicks
    assert (clicks["clicked"], clicks["clicks"], clicks["top_links"]) == (0, 0, [])
    reputation = report.pop("reputation")
    assert reputation["hard_bounce_rate"] == round(100 * report["failed_permanent"] / report["sent"], 2)
    assert reputation["complaint_rate"] == round(100 * report["complained"] / report["delivered"], 2)
    return report

async def apply(db, events: list[DeliveryEvent], *, recount: bool = True) -> None:
    await apply_batch(db, EventBatch(events=events), "poll")
    if recount:
        async with db.acquire() as conn, conn.transaction():
            await aggregate(conn)


@pytest.mark.parametrize("chunked", [False, True], ids=["in one transaction", "chunked"])
async def test_the_recorded_report_answers_as_the_one_computed_from_the_rows(db, postgres_url, mailgun, chunked):
    settings = make_settings(postgres_url, mailgun, batch_size=7)
    seeded = await seed_email(db, members=60, paid_every=3, html=SEGMENTED)
    members = [r["id"] for r in await db.fetch("SELECT id FROM members ORDER BY id")]
    bounced, complained_before, disabled, gone, unusable, *_ = members
    await db.execute("INSERT INTO suppressions (email, reason) SELECT email, 'bounce' FROM members WHERE id = $1",
                     bounced)
    await db.execute("INSERT INTO suppressions (email, reason) SELECT email, 'spam' FROM members WHERE id = $1",
                     complained_before)
    await db.execute("UPDATE members SET email_disabled = true WHERE id = $1", disabled)
    await db.execute("DELETE FROM members_newsletters WHERE member_id = $1", gone)
    await db.execute("UPDATE members SET email = replace(email, '@', ',x@') WHERE id = $1", unusable)
    activities = BatchCreationActivities(Dependencies(settings=settings, pool=db, provider=None, temporal=None))
    while (await ActivityEnvironment().run(activities.create_batches, CreateBatchesInput(
            email_id=seeded.email_id, retry_failed=False, chunked=chunked))).creating:
        pass
    await db.execute("UPDATE email_batches SET status = 'submitted', provider_id = id || '@mg' "
                     "WHERE email_id = $1 AND id IN ("
                     "SELECT id FROM email_batches WHERE email_id = $1 ORDER BY id LIMIT 5)", seeded.email_id)

    # Events as analytics applies them: deliveries, opens over 50 minutes, failures, unsubscribes
    # (one of them seen twice), complaints; then its recount.
    recipients = [r["member_email"] for r in await db.fetch(
        "SELECT member_email FROM email_recipients WHERE email_id = $1 ORDER BY member_id", seeded.email_id)]
    assert len(recipients) == 55
    t0, e = time.time() - 7200, seeded.email_id
    events = [event(e, "delivered", a, t0, n) for n, a in enumerate(recipients[:50])]
    events += [event(e, "opened", a, t0 + 60 * n, n) for n, a in enumerate(recipients[:30:2])]
    events += [event(e, "opened", a, t0 + 3000 - n, n) for n, a in enumerate(recipients[1:9:2])]
    events += [event(e, "failed-permanent", recipients[50], t0, 50, severity="permanent", code=550,
                     message=f"mailbox <{recipients[50]}> unavailable"),
               event(e, "failed-temporary", recipients[51], t0, 51, severity="temporary", code=421,
                     message="try again later")]
    events += [event(e, "unsubscribed", a, t0 + 100 + n, n) for n, a in enumerate(recipients[2:5])]
    events += [event(e, "unsubscribed", recipients[2], t0 + 50, 99)]
    events += [event(e, "complained", a, t0 + 200, n) for n, a in enumerate(recipients[5:7])]
    await apply(db, events)

    report = await newsletter_report(e, settings=settings)
    report = as_computed(report)
    assert report == await report_before_0029(e, settings=settings)
    assert report["left_out"] == {"suppressed-bounce": 1, "suppressed-complaint": 1, "disabled": 1,
                                  "not-subscribed": 1, "not-in-filter": 0, "unusable-address": 1, "other": 0}
    assert (report["unsubscribed"], report["complained"], report["opened"]) == (3, 2, 19)
    assert {s["segment"] for s in report["segments"]} == {"free", "paid"}
    assert await db.fetchval("SELECT count(*) FROM members_subscribe_events WHERE email_id = $1", e) == 3

    # An open applied since the last recount still shows in the chart, outside the recorded range.
    await apply(db, [event(e, "opened", recipients[40], t0 + 3600, 40)], recount=False)
    later = await newsletter_report(e, settings=settings)
    assert sum(b.opens for b in later.opens_over_time.buckets) == 20
    await apply(db, [], recount=True)

    # Recorded when it happened: a left-out member who changes since is still counted as left out
    # for the reason they had, where counting from the rows says what they are now.
    await db.execute("UPDATE members SET email_disabled = false WHERE id = $1", disabled)
    assert (await newsletter_report(e, settings=settings)).left_out["disabled"] == 1
    assert (await report_before_0029(e, settings=settings))["left_out"]["disabled"] == 0

    # An email whose batches were written before schema 0029 is counted from its rows, as then.
    await db.execute("UPDATE emails SET left_out = NULL, first_opened_at = NULL, last_opened_at = NULL "
                     "WHERE id = $1", e)
    assert as_computed(await newsletter_report(e, settings=settings)) == await report_before_0029(e, settings=settings)


async def test_a_report_read_again_answers_as_its_rows_do_after_each_change(db, postgres_url, mailgun):
    """The whole-recipient figures a process keeps (operations/reports.py, `_MEMO`) are never used
    past a change: an open applied (before and after its recount), a batch no longer submitted."""
    settings = make_settings(postgres_url, mailgun, batch_size=4)
    e = (await seed_email(db, members=12)).email_id
    activities = BatchCreationActivities(Dependencies(settings=settings, pool=db, provider=None, temporal=None))
    await ActivityEnvironment().run(activities.create_batches, CreateBatchesInput(email_id=e, retry_failed=False))
    await db.execute("UPDATE email_batches SET status = 'submitted', provider_id = id || '@mg' WHERE email_id = $1", e)
    recipients = [r["member_email"] for r in await db.fetch(
        "SELECT member_email FROM email_recipients WHERE email_id = $1 ORDER BY member_id", e)]
    assert len(recipients) == 12
    t0 = time.time() - 3600
    await apply(db, [event(e, "delivered", a, t0, 100 + n) for n, a in enumerate(recipients)]
                + [event(e, "opened", a, t0 + 60 * n, n) for n, a in enumerate(recipients[:5])])

    async def read() -> dict:
        report = as_computed(await newsletter_report(e, settings=settings))
        assert report == await report_before_0029(e, settings=settings)
        return report

    first = await read()
    assert (first["sent"], sum(b["opens"] for b in first["opens_over_time"]["buckets"])) == (12, 5)
    assert await read() == first  # kept: nothing changed
    await apply(db, [event(e, "opened", recipients[6], t0 + 90, 6)], recount=False)
    # Until the recount, the figures above the chart read the chart's rows (the oracle, the aggregates).
    pending = as_computed(await newsletter_report(e, settings=settings))
    assert (pending["opened"], sum(b["opens"] for b in pending["opens_over_time"]["buckets"])) == (6, 6)
    await apply(db, [], recount=True)
    assert (await read())["opened"] == 6
    await db.execute("UPDATE email_batches SET status = 'failed' WHERE id = (SELECT min(id) FROM email_batches "
                     "WHERE email_id = $1)", e)
    assert (await read())["sent"] == 8

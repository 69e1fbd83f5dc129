"""Recipient filters are bounded: a filter nested hundreds of levels deep or holding thousands of terms
is refused with a one-line filter error where it enters (the send's start) and, should one reach
the lock (a scheduled post's email), fails the email with the reason at once instead of being
retried. Before: RecursionError, "Failure exceeds size limit", retried for long, the email pending.
Real PostgreSQL, Temporal's time-skipping server, the simulator."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowFailureError

from operations.newsletter import start_newsletter
from pressroom.errors import BadInput
from pressroom.recipient_filter import MAX_DEPTH, MAX_LENGTH, MAX_TERMS, MAX_VALUES, FilterError, parse

from .test_audiences import seed
from .test_send import run_send

DEEP = "(" * 331 + "label:vip" + ")" * 331
MANY_TERMS = ",".join(f"label:l{n}" for n in range(10_000))
MANY_SHORT_TERMS = ",".join(["label:vip"] * (MAX_TERMS + 1))
MANY_VALUES = "label:[" + ",".join(f"l{n}" for n in range(MAX_VALUES + 1)) + "]"


@pytest.mark.parametrize("text, words", [
    (DEEP, f"parentheses nested deeper than {MAX_DEPTH} at {MAX_DEPTH + 1}"),
    (MANY_TERMS, f"longer than {MAX_LENGTH:,} characters"),
    (MANY_SHORT_TERMS, f"more than {MAX_TERMS} terms"),
    (MANY_VALUES, f"more than {MAX_VALUES} values"),
])
def test_a_filter_past_its_bounds_is_a_filter_error_in_one_short_line(text, words):
    with pytest.raises(FilterError) as refused:
        parse(text)
    message = str(refused.value)
    assert words in message and "\n" not in message and len(message) < 200


def test_filters_at_their_bounds_parse():
    assert str(parse("(" * MAX_DEPTH + "label:vip" + ")" * MAX_DEPTH)) == "label:vip"
    assert len(str(parse(",".join(["label:vip"] * MAX_TERMS)))) == MAX_TERMS * 10 - 1
    parse("label:[" + ",".join(f"l{n}" for n in range(MAX_VALUES)) + "]")


@pytest.mark.parametrize("recipient_filter", [DEEP, MANY_TERMS])
async def test_the_send_start_refuses_it(db, newsletter_settings, recipient_filter):
    seeded = await seed(db, recipient_filter=recipient_filter)
    with pytest.raises(BadInput) as refused:
        await start_newsletter(seeded.email_id, settings=newsletter_settings())
    assert str(refused.value).startswith(f"email {seeded.email_id}: recipient filter")
    assert await db.fetchval("SELECT status FROM emails WHERE id = $1", seeded.email_id) == "pending"


@pytest.mark.parametrize("recipient_filter, words", [(DEEP, "parentheses nested deeper"),
                                                     (MANY_SHORT_TERMS, "more than 100 terms")])
async def test_the_lock_fails_the_email_with_the_reason_at_once(db, mailgun, ts_worker, recipient_filter, words):
    client, settings = ts_worker
    seeded = await seed(db, recipient_filter=recipient_filter)
    with pytest.raises(WorkflowFailureError) as failed:
        await run_send(client, settings, seeded.email_id)
    assert words in str(failed.value.cause)
    email = await db.fetchrow("SELECT status, error FROM emails WHERE id = $1", seeded.email_id)
    assert email["status"] == "failed" and words in email["error"]
    history = await client.get_workflow_handle(f"newsletter-{seeded.email_id}").fetch_history()
    attempts = [e.activity_task_started_event_attributes.attempt for e in history.events
                if e.HasField("activity_task_started_event_attributes")]
    assert attempts == [1]  # not retried
    assert mailgun.stats()["messages"] == 0

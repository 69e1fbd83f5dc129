"""An email's report figures that read its recipient rows, beside the whole-email counts: read live
by `newsletter report` while the rows are kept, and recorded once by the retention fold before they
go (activities/retention.py), so that the report reads the same before and after."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import asyncpg

from activities.newsletter.left_out import LEFT_OUT_COUNTS, with_filter
from pressroom.store.reports import (
    LEFT_THROUGH_EMAIL,
    RECIPIENT_COUNTS,
    SEGMENT_OUTCOMES,
    UNSUBSCRIBED,
    UNSUBSCRIBED_BEFORE_0029,
    opens_chart,
)

# The email's row as these figures read it.
EMAIL_FOR_FIGURES = """
SELECT e.id, e.post_id, e.newsletter_id, e.recipient_filter, e.created_at, e.left_out, e.first_opened_at,
       e.last_opened_at,
       EXISTS (SELECT 1 FROM email_batches b WHERE b.email_id = e.id AND b.member_segment IS NOT NULL) AS segmented
FROM emails e WHERE e.id = $1"""


async def beside_recipients(conn: asyncpg.Connection, email: asyncpg.Record, *, segmented: bool) -> dict:
    """Unsubscribed, the segments' outcomes and who was left out by reason (as recorded since 0029,
    counted from the rows before)."""
    recorded = email["left_out"] is not None  # batches written since 0029
    unsubscribed = await conn.fetchval(UNSUBSCRIBED if recorded else UNSUBSCRIBED_BEFORE_0029,
                                       email["id"], email["newsletter_id"])
    outcomes = SEGMENT_OUTCOMES.format(unsubscribed=f"er.member_id IN ({LEFT_THROUGH_EMAIL})" if recorded
                                       else "mn.id IS NULL")
    segments = ([dict(r) for r in await conn.fetch(outcomes, email["id"], email["newsletter_id"])]
                if segmented else [])
    if recorded:
        left_out = json.loads(email["left_out"])
    else:
        counts, values = with_filter(LEFT_OUT_COUNTS, email, as_of=datetime.now(UTC))
        left_out = {r["reason"]: r["n"] for r in await conn.fetch(
            counts, email["id"], email["newsletter_id"], email["created_at"], values)}
    return {"unsubscribed": unsubscribed, "segments": segments, "left_out": left_out}


async def row_figures(conn: asyncpg.Connection, email_id: str) -> dict:
    """Every figure of the email's report that reads its recipient rows, as the report reads them."""
    email = await conn.fetchrow(EMAIL_FOR_FIGURES, email_id)
    figures = dict(await conn.fetchrow(RECIPIENT_COUNTS, email_id))
    figures.update(await beside_recipients(conn, email, segmented=email["segmented"]))
    figures["opens"] = await opens_chart(conn, email)
    return figures

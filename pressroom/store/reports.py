"""An email's report figures that read its recipient rows: the report reads them live while the rows
are kept, and the retention fold records them once before the rows go (pressroom/store/retention.py)."""

from __future__ import annotations

from datetime import timedelta

import asyncpg

# The figures of the whole email: recipients counted from the email's own index entries; delivered
# and opened as analytics last aggregated them (the figures `newsletter list` shows); recipients of
# batches not (yet) accepted, from those batches alone.
RECIPIENT_COUNTS = """
SELECT (SELECT count(*) FROM email_recipients WHERE email_id = $1) AS recipients,
       (SELECT count(*) FROM email_recipients er JOIN email_batches b ON b.id = er.batch_id
        WHERE b.email_id = $1 AND b.status <> 'submitted') AS not_sent"""
# The recipients who left the email's newsletter through it (its link, or the provider's
# unsubscribe event for it), each once.
LEFT_THROUGH_EMAIL = """
SELECT member_id FROM members_subscribe_events WHERE email_id = $1 AND newsletter_id = $2 AND NOT subscribed"""
UNSUBSCRIBED = f"SELECT count(DISTINCT member_id) FROM ({LEFT_THROUGH_EMAIL}) AS left_through"
# Before 0029: recipients no longer subscribed to the email's newsletter, whoever removed them: both
# sides read in member order from their indexes.
UNSUBSCRIBED_BEFORE_0029 = """
SELECT count(*) FROM email_recipients er
WHERE er.email_id = $1
  AND NOT EXISTS (SELECT 1 FROM members_newsletters mn WHERE mn.newsletter_id = $2 AND mn.member_id = er.member_id)"""

# Per segment, for a segmented email only: recipients and what analytics recorded for each; who
# unsubscribed as `UNSUBSCRIBED` (or, before 0029, `UNSUBSCRIBED_BEFORE_0029`) counts them.
SEGMENT_OUTCOMES = """
SELECT b.member_segment AS segment, count(*) AS recipients,
       count(*) FILTER (WHERE b.status = 'submitted') AS sent,
       count(er.delivered_at) AS delivered, count(er.opened_at) AS opened,
       count(*) FILTER (WHERE {unsubscribed}) AS unsubscribed
FROM email_recipients er
JOIN email_batches b ON b.id = er.batch_id
LEFT JOIN members_newsletters mn ON mn.member_id = er.member_id AND mn.newsletter_id = $2
WHERE er.email_id = $1
GROUP BY b.member_segment ORDER BY b.member_segment NULLS FIRST"""

_OPENS_RANGE = ("SELECT min(opened_at), max(opened_at) FROM email_recipients "
                "WHERE email_id = $1 AND opened_at IS NOT NULL")
_OPENS = """
SELECT date_bin($2::interval, opened_at, $3) AS at, count(*) AS n
FROM email_recipients WHERE email_id = $1 AND opened_at IS NOT NULL GROUP BY 1 ORDER BY 1"""

# Bucket widths for the opens chart: the smallest that keeps it within CHART_BUCKETS rows.
CHART_BUCKETS = 24
_WIDTHS = [timedelta(seconds=s) for s in (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 86400,
                                          7 * 86400)]


async def opens_chart(conn: asyncpg.Connection, email: asyncpg.Record) -> dict:
    """The chart spans the first and last open the recount kept (read from the rows when it has not
    run since 0029); an open applied since the last recount widens it by its buckets."""
    first, last = email["first_opened_at"], email["last_opened_at"]
    if first is None:
        first, last = await conn.fetchrow(_OPENS_RANGE, email["id"])
    if first is None:
        return {"bucket_seconds": None, "buckets": []}
    width = next((w for w in _WIDTHS if (last - first) / w < CHART_BUCKETS), _WIDTHS[-1])
    counts = {r["at"]: r["n"] for r in await conn.fetch(_OPENS, email["id"], width, first)}
    first, last = min([first, *counts]), max([last, *counts])
    at, buckets = first, []
    while at <= last:  # every bucket, those without opens too: the chart's time axis is even
        buckets.append({"at": at, "opens": counts.get(at, 0)})
        at += width
    return {"bucket_seconds": int(width.total_seconds()), "buckets": buckets}

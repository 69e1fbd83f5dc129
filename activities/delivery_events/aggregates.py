"""Recounting the emails and members whose events changed (marked dirty by the apply)."""

from __future__ import annotations

import asyncpg

from activities.delivery_events.apply import rows_of

# An email's figures, with its first and last open (the report's opens chart spans them).
_AGGREGATE_EMAILS = """
WITH dirty AS (DELETE FROM email_analytics_dirty_emails RETURNING email_id),
counts AS (
    SELECT er.email_id, count(er.delivered_at) AS delivered, count(er.opened_at) AS opened,
           count(er.failed_at) AS failed, min(er.opened_at) AS first_open, max(er.opened_at) AS last_open
    FROM email_recipients er WHERE er.email_id IN (SELECT email_id FROM dirty)
      -- A folded email keeps the figures it had: its rows are going or gone (schema 0091).
      AND NOT EXISTS (SELECT 1 FROM email_figures_folded f WHERE f.email_id = er.email_id)
    GROUP BY er.email_id)
UPDATE emails e SET delivered_count = c.delivered, opened_count = c.opened, failed_count = c.failed,
                    first_opened_at = c.first_open, last_opened_at = c.last_open, updated_at = now()
FROM counts c WHERE e.id = c.email_id"""

# Open rate as Ghost computes it: opened / emails with open tracking, only from 5 tracked emails.
# A member whose figures come out as stored is not written: a member row rewritten is a new row
# version and an entry in each of its indexes, and most recounts after a re-read page, a delivery
# or a failure find the figures unchanged.
_AGGREGATE_MEMBERS = """
WITH dirty AS (DELETE FROM email_analytics_dirty_members RETURNING member_id),
counts AS (
    -- Their rows, and what the retention fold kept of the rows it dropped (schema 0091).
    SELECT member_id, sum(received) AS received, sum(opened) AS opened, sum(tracked) AS tracked FROM (
        SELECT er.member_id, count(*) AS received, count(er.opened_at) AS opened,
               count(*) FILTER (WHERE e.track_opens) AS tracked
        FROM email_recipients er JOIN emails e ON e.id = er.email_id
        WHERE er.member_id IN (SELECT member_id FROM dirty) GROUP BY er.member_id
        UNION ALL
        SELECT f.member_id, f.received, f.opened, f.tracked FROM member_figures_folded f
        WHERE f.member_id IN (SELECT member_id FROM dirty)) rows_and_folded
    GROUP BY member_id),
figures AS (
    SELECT member_id, received, opened,
           CASE WHEN tracked >= 5 THEN LEAST(100, round(100.0 * opened / tracked))::int END AS rate
    FROM counts)
UPDATE members m SET email_count = f.received, email_opened_count = f.opened, email_open_rate = f.rate,
    updated_at = now()
FROM figures f WHERE m.id = f.member_id
  AND (m.email_count, m.email_opened_count, m.email_open_rate) IS DISTINCT FROM (f.received, f.opened, f.rate)"""


async def aggregate(conn: asyncpg.Connection) -> tuple[int, int]:
    """Recount the emails and members whose events changed: (emails, members whose figures changed);
    safe to repeat."""
    emails = rows_of(await conn.execute(_AGGREGATE_EMAILS))
    members = rows_of(await conn.execute(_AGGREGATE_MEMBERS))
    return emails, members

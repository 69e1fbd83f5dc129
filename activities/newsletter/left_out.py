"""Who was left out of an email and why, counted once when its batches are all written, so that
`newsletter report` reads the counts instead of comparing every member with every recipient. The
reasons are defined here once; the report's list of left-out members reads them from here."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from activities.newsletter.audience import PREDICATE
from pressroom.recipient_filter import FilterError
from pressroom.store.audience import filter_sql

LEFT_OUT_REASONS = ("suppressed-bounce", "suppressed-complaint", "disabled", "not-subscribed", "not-in-filter",
                    "unusable-address", "other")
# Why a member `m` who existed when the email was made is not among its recipients: the first reason
# that applies, in the order the send's audience query excludes them. Reads LEFT_OUT_JOINS' rows
# and $4, the filter's values (named even when the filter reads none, so that its type is known).
LEFT_OUT_REASON = f"""
CASE WHEN s.reason = 'bounce' THEN 'suppressed-bounce' WHEN s.reason = 'spam' THEN 'suppressed-complaint'
     WHEN m.email_disabled THEN 'disabled' WHEN mn.id IS NULL THEN 'not-subscribed'
     WHEN $4::text[] IS NOT NULL AND NOT ({PREDICATE}) THEN 'not-in-filter'
     WHEN x.member_id IS NOT NULL THEN 'unusable-address'
     ELSE 'other' END"""
# $1 the email, $2 its newsletter.
LEFT_OUT_JOINS = """
LEFT JOIN members_newsletters mn ON mn.member_id = m.id AND mn.newsletter_id = $2
LEFT JOIN suppressions s ON s.email = m.email
LEFT JOIN email_skipped_recipients x ON x.email_id = $1 AND x.member_id = m.id"""
# The members who existed when the email was made ($3) and are not among its recipients, counted by
# reason. The missing members are found first, both sides read in id order from their indexes
# alone; only those few rows are then read to say why.
LEFT_OUT_COUNTS = f"""
WITH missing AS MATERIALIZED (
    SELECT m.id FROM members m
    WHERE NOT EXISTS (SELECT 1 FROM email_recipients er WHERE er.email_id = $1 AND er.member_id = m.id))
SELECT {LEFT_OUT_REASON} AS reason, count(*) AS n
FROM missing JOIN members m ON m.id = missing.id
{LEFT_OUT_JOINS}
WHERE m.created_at <= $3
GROUP BY 1"""
# Into emails.left_out in one statement, once: a creation repeated, or a later send of the failed
# batches, leaves the first count alone.
RECORD_LEFT_OUT = f"""
WITH reasons AS ({LEFT_OUT_COUNTS})
UPDATE emails SET left_out = (SELECT coalesce(jsonb_object_agg(reason, n), '{{}}') FROM reasons)
WHERE id = $1 AND left_out IS NULL"""


def with_filter(statement: str, email: asyncpg.Record, *, as_of: datetime) -> tuple[str, list[str]]:
    """The statement with the email's recipient filter as its not-in-filter test, reading its values
    from $4, tiers judged at `as_of`; a filter that cannot be parsed leaves nobody out for it."""
    try:
        predicate, values = filter_sql(email["recipient_filter"], as_of=as_of, post_id=email["post_id"], param=4)
    except FilterError:
        predicate, values = "TRUE", []
    return statement.replace(PREDICATE, predicate), values


async def record_left_out(conn: asyncpg.Connection, email_id: str, email: asyncpg.Record, *, as_of: datetime) -> None:
    """Count the email's left-out members by reason, in the caller's transaction; `email` is its row
    (newsletter_id, post_id, recipient_filter, created_at), `as_of` the moment its audience was
    taken: tiers are judged then, as the audience judged them."""
    statement, values = with_filter(RECORD_LEFT_OUT, email, as_of=as_of)
    await conn.execute(statement, email_id, email["newsletter_id"], email["created_at"], values)

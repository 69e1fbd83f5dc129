"""Who was left out of an email and why, counted once when its batches are all written, so that
`newsletter report` reads the counts instead of comparing every member with every recipient."""

from __future__ import annotations

from activities.newsletter.audience import PREDICATE, filter_sql
from pressroom.recipient_filter import FilterError

# The members who existed when the email was made ($3) and are not among its recipients, each with
# the first reason that applies, in the order the send's audience query excludes them ($2 its
# newsletter, $4 the filter's values); counted by reason into emails.left_out in one statement,
# once: a creation repeated, or a later send of the failed batches, leaves the first count alone.
# The missing members are found first, both sides read in id order from their indexes alone; only
# those few rows are then read to say why.
RECORD_LEFT_OUT = f"""
WITH missing AS MATERIALIZED (
    SELECT m.id FROM members m
    WHERE NOT EXISTS (SELECT 1 FROM email_recipients er WHERE er.email_id = $1 AND er.member_id = m.id)),
reasons AS (
    SELECT CASE WHEN s.reason = 'bounce' THEN 'suppressed-bounce' WHEN s.reason = 'spam' THEN 'suppressed-complaint'
                WHEN m.email_disabled THEN 'disabled' WHEN mn.id IS NULL THEN 'not-subscribed'
                WHEN $4::text[] IS NOT NULL AND NOT ({PREDICATE}) THEN 'not-in-filter'
                WHEN x.member_id IS NOT NULL THEN 'unusable-address' ELSE 'other' END AS reason, count(*) AS n
    FROM missing JOIN members m ON m.id = missing.id
    LEFT JOIN members_newsletters mn ON mn.member_id = m.id AND mn.newsletter_id = $2
    LEFT JOIN suppressions s ON s.email = m.email
    LEFT JOIN email_skipped_recipients x ON x.email_id = $1 AND x.member_id = m.id
    WHERE m.created_at <= $3
    GROUP BY 1)
UPDATE emails SET left_out = (SELECT coalesce(jsonb_object_agg(reason, n), '{{}}') FROM reasons)
WHERE id = $1 AND left_out IS NULL"""


async def record_left_out(conn, email_id: str, email) -> None:
    """Count the email's left-out members by reason, in the caller's transaction; `email` is its row
    (newsletter_id, post_id, recipient_filter, created_at). Tiers are judged now, as the report
    judged them; a filter that cannot be parsed leaves nobody out for it."""
    try:
        predicate, values = filter_sql(email["recipient_filter"], as_of=await conn.fetchval("SELECT now()"),
                                       post_id=email["post_id"], param=4)
    except FilterError:
        predicate, values = "TRUE", []
    await conn.execute(RECORD_LEFT_OUT.replace(PREDICATE, predicate), email_id, email["newsletter_id"],
                       email["created_at"], values)

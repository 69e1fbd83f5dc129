"""One way to leave a newsletter, whoever asks: the provider's unsubscribe events (applied with their
batch), a member's link, an operator."""

from __future__ import annotations

import asyncpg

# One way to leave, whoever asks (a provider's event, a member's link, an operator): `leaving` names
# (member_id, newsletter_id or NULL for every newsletter, source, email_id, at); the subscriptions
# are removed and each removal recorded with its source, time and email. A subscription already gone
# records nothing, so a repeat changes nothing. Answers the subscriptions removed.
LEAVE = """
WITH {before}leaving AS ({leaving}), removed AS (
    DELETE FROM members_newsletters mn USING leaving l
    WHERE mn.member_id = l.member_id AND (l.newsletter_id IS NULL OR mn.newsletter_id = l.newsletter_id)
    RETURNING mn.member_id, mn.newsletter_id
), recorded AS (
    INSERT INTO members_subscribe_events (member_id, newsletter_id, subscribed, source, email_id, created_at)
    SELECT DISTINCT ON (r.member_id, r.newsletter_id) r.member_id, r.newsletter_id, false, l.source, l.email_id, l.at
    FROM removed r JOIN leaving l
      ON l.member_id = r.member_id AND (l.newsletter_id IS NULL OR l.newsletter_id = r.newsletter_id)
    ORDER BY r.member_id, r.newsletter_id, l.at
    RETURNING 1
)
{answer}"""
REMOVED = "SELECT count(*) FROM recorded"

# One member's leaving (a link, an operator): the email is kept only when they received it, so a
# link's unsigned `email` parameter cannot count a leaving against another email.
_LEAVE_ONE = LEAVE.format(before="", answer=REMOVED, leaving="""
    SELECT $1::text AS member_id, $2::text AS newsletter_id, $3::text AS source,
           (SELECT er.email_id FROM email_recipients er WHERE er.email_id = $4 AND er.member_id = $1 LIMIT 1)
               AS email_id, now() AS at""")


# A member's link: the member and the newsletter found by their uuids and the member left, in one
# statement (one round trip per click). $3: every newsletter. No row: no such member; a row without
# newsletter_id while one was named: no such newsletter (and nothing left).
_LEAVE_BY_LINK = LEAVE.format(
    before="""target AS (
    SELECT m.id AS member_id, m.email, n.id AS newsletter_id, n.name AS newsletter_name
    FROM members m LEFT JOIN newsletters n ON n.uuid = $2::uuid WHERE m.uuid = $1::uuid
), """,
    leaving="""
    SELECT t.member_id, CASE WHEN $3 THEN NULL ELSE t.newsletter_id END AS newsletter_id, 'link'::text AS source,
           (SELECT er.email_id FROM email_recipients er WHERE er.email_id = $4 AND er.member_id = t.member_id
            LIMIT 1) AS email_id, now() AS at
    FROM target t WHERE $2::uuid IS NULL OR t.newsletter_id IS NOT NULL""",
    answer="SELECT t.*, (SELECT count(*) FROM recorded) AS removed FROM target t")


async def leave_by_link(pool_or_conn: asyncpg.Pool | asyncpg.Connection, member_uuid: str, newsletter_uuid: str | None,
                        every: bool,
                        email_id: str | None) -> asyncpg.Record | None:
    """The link's member leaves (as `leave` does, recorded as `link`): (member_id, email,
    newsletter_id, newsletter_name, removed), or None when no member has that uuid."""
    return await pool_or_conn.fetchrow(_LEAVE_BY_LINK, member_uuid, newsletter_uuid, every, email_id)


async def leave(conn: asyncpg.Connection, member_id: str, newsletter_id: str | None, source: str,
                email_id: str | None = None) -> int:
    """Unsubscribe a member from a newsletter (None: from every one) exactly as the provider's
    unsubscribe event does, recorded with `source`; the subscriptions removed. Safe to repeat."""
    return await conn.fetchval(_LEAVE_ONE, member_id, newsletter_id, source, email_id)

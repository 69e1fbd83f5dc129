"""The clicks of Pressroom's own redirects, as the report and a member's story show them
(frontdoor/redirects.py records them; docs/clicks.md).

Readers' figures leave out what was taken for a mail scanner (`members_click_events.scanner`),
which is counted apart, by why, and a member's click not yet judged (it settles within seconds);
a click whose link named no member (a forwarded email, or anyone's request) is counted apart
(`without_member`), never as a member who clicked, and never ranks a link.
"""

from __future__ import annotations

from operations.answers import EmailClicks, MemberClick, TopLink

TOP_LINKS = 10

# A reader's click: not a scanner's, and judged (a member's click is told apart from a scanner's
# burst once it settles, a few seconds after it came: frontdoor/redirects.py).
_READER = ("c.scanner IS NULL AND NOT EXISTS (SELECT 1 FROM members_click_events_unsettled u "
           "WHERE u.click_id = c.id)")

_EMAIL_CLICKS = f"""
SELECT count(DISTINCT c.member_id) FILTER (WHERE {_READER}) AS clicked,
       count(*) FILTER (WHERE {_READER}) AS clicks,
       count(*) FILTER (WHERE c.scanner IS NULL AND c.member_id IS NULL) AS without_member
FROM redirects r JOIN members_click_events c ON c.redirect_id = r.id
WHERE r.post_id = $1"""

_CLICKED_BY_POST = f"""
SELECT r.post_id, count(DISTINCT c.member_id) FILTER (WHERE {_READER}) AS clicked
FROM redirects r JOIN members_click_events c ON c.redirect_id = r.id
WHERE r.post_id = ANY($1::text[]) GROUP BY r.post_id"""

_SET_APART = """
SELECT c.scanner, count(*) AS n FROM redirects r JOIN members_click_events c ON c.redirect_id = r.id
WHERE r.post_id = $1 AND c.scanner IS NOT NULL GROUP BY c.scanner"""

# Ranked by members' clicks only: a request that names no member is anyone's to make (a browser's
# User-Agent and no `m`), so it is counted apart (without_member) and never moves a link up.
_TOP_LINKS = f"""
SELECT r."to" AS target, count(DISTINCT c.member_id) AS clickers, count(*) AS clicks
FROM redirects r JOIN members_click_events c ON c.redirect_id = r.id AND {_READER} AND c.member_id IS NOT NULL
WHERE r.post_id = $1
GROUP BY r.id, r."to" ORDER BY clickers DESC, clicks DESC, target LIMIT $2"""

_MEMBER_CLICKS = """
SELECT c.created_at AS at, r."to" AS target, e.id AS email_id, c.scanner
FROM members_click_events c JOIN redirects r ON r.id = c.redirect_id
LEFT JOIN emails e ON e.post_id = r.post_id
WHERE c.member_id = $1
ORDER BY c.created_at DESC, c.id DESC LIMIT $2"""


async def email_clicks(conn, post_id: str, delivered: int, *, top: int = TOP_LINKS) -> EmailClicks:
    """The clicks on an email's links (its post's redirects: one email per post)."""
    figures = await conn.fetchrow(_EMAIL_CLICKS, post_id)
    set_apart = {r["scanner"]: r["n"] for r in await conn.fetch(_SET_APART, post_id)}
    links = [TopLink(**dict(r)) for r in await conn.fetch(_TOP_LINKS, post_id, top)]
    return EmailClicks(clicked=figures["clicked"], clicks=figures["clicks"], without_member=figures["without_member"],
                       rate=click_rate(figures["clicked"], delivered),
                       set_apart=sum(set_apart.values()), set_apart_by=set_apart, top_links=links)


def click_rate(clicked: int, delivered: int) -> float | None:
    """Members who clicked over delivered, percent: the report's and the list's alike."""
    return round(100.0 * clicked / delivered, 1) if delivered else None


async def clicked_by_post(conn, post_ids: list[str]) -> dict[str, int]:
    """Members who clicked, per post, for a page of emails (email_clicks's `clicked`)."""
    return {r["post_id"]: r["clicked"] for r in await conn.fetch(_CLICKED_BY_POST, post_ids)}


async def member_clicks(conn, member_id: str, limit: int = 20) -> list[MemberClick]:
    """A member's last clicks, newest first."""
    return [MemberClick(**dict(r)) for r in await conn.fetch(_MEMBER_CLICKS, member_id, limit)]

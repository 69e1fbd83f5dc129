"""The operator's lists: emails, posts, members and outbox entries, newest first, a page at a time.

Each list walks its table's (created_at, id) index from the newest row and stops after one page;
the next page starts after the last row shown (`after`, keyset paging), so page 1,000 costs what
page 1 does. Filters narrow the walk; each row carries the ids the other commands take.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from activities.posts.publish import NEWSLETTER_NOT_GOING
from operations.answers import Answer, EmailRow, MemberRow, OutboxRow, Page, PostRow
from operations.common import parse_moment
from pressroom import database
from pressroom.errors import BadInput, NotFound, shorten
from pressroom.inputs import entity_id, slug
from pressroom.settings import Settings, get_settings

DEFAULT_PAGE = 50
LARGEST_PAGE = 1000

EMAIL_STATES = ("pending", "submitting", "paused", "submitted", "failed", "cancelled")
# An email as people are told of it: a send that paused itself for its early rates reads `paused`,
# its reason in place of an error (its row stays `submitting`: its lock is held while it waits).
SHOWN_STATUS = "CASE WHEN e.status = 'submitting' AND e.paused_at IS NOT NULL THEN 'paused' ELSE e.status END"
SHOWN_ERROR = "coalesce(e.error, CASE WHEN e.status = 'submitting' THEN 'paused: ' || e.paused_reason END)"
POST_STATES = ("draft", "scheduled", "published", "sent")
MEMBER_STATES = ("free", "paid", "comped")
OUTBOX_STATES = ("pending", "sending", "succeeded", "failed", "aborted", "completed", "skipped")

# "failed" is the report's: recipients with a recorded failure, permanent or temporary.
_EMAILS = f"""
SELECT e.id AS email_id, e.post_id, e.newsletter_id, n.slug AS newsletter, e.subject, {SHOWN_STATUS} AS status,
       {SHOWN_ERROR} AS error,
       e.email_count AS recipients, e.delivered_count AS delivered, e.opened_count AS opened,
       (SELECT count(*) FROM email_recipient_failures f WHERE f.email_id = e.id) AS failed, e.created_at,
       e.submitted_at, {NEWSLETTER_NOT_GOING} AS will_not_go_out
FROM emails e LEFT JOIN newsletters n ON n.id = e.newsletter_id LEFT JOIN posts p ON p.id = e.post_id
WHERE ($1::text IS NULL OR {SHOWN_STATUS} = $1) AND ($2::timestamptz IS NULL OR e.created_at >= $2)
  AND ($3::text IS NULL OR e.newsletter_id = $3)
  AND ($4::timestamptz IS NULL OR (e.created_at, e.id) < ($4, $5::text))
ORDER BY e.created_at DESC, e.id DESC LIMIT $6"""

_POSTS = """
SELECT p.id AS post_id, p.title, p.status, p.visibility, p.published_at AS publish_at,
       p.publish_completed_at AS published_at, p.newsletter_id, n.slug AS newsletter, e.id AS email_id,
       e.status AS email_status, p.created_at
FROM posts p LEFT JOIN newsletters n ON n.id = p.newsletter_id LEFT JOIN emails e ON e.post_id = p.id
WHERE ($1::text IS NULL OR p.status = $1) AND ($2::timestamptz IS NULL OR p.created_at >= $2)
  AND ($3::text IS NULL OR p.newsletter_id = $3)
  AND ($4::timestamptz IS NULL OR (p.created_at, p.id) < ($4, $5::text))
ORDER BY p.created_at DESC, p.id DESC LIMIT $6"""

_MEMBERS = """
SELECT m.id AS member_id, m.email, m.name, m.status, m.email_disabled, s.reason AS suppressed,
       m.email_count, m.email_opened_count, m.email_open_rate, m.created_at
FROM members m LEFT JOIN suppressions s ON s.email = m.email
WHERE ($1::text IS NULL OR m.status = $1) AND ($2::timestamptz IS NULL OR m.created_at >= $2)
  AND ($3::text IS NULL OR EXISTS (SELECT 1 FROM members_newsletters mn
                                   WHERE mn.member_id = m.id AND mn.newsletter_id = $3))
  AND ($4::timestamptz IS NULL OR (m.created_at, m.id) < ($4, $5::text))
  AND ($7::text IS NULL OR m.id IN (SELECT ml.member_id FROM members_labels ml JOIN labels l ON l.id = ml.label_id
                                    WHERE l.slug = $7))
  AND ($8::text IS NULL OR m.id IN (SELECT mp.member_id FROM members_products mp JOIN products p ON p.id = mp.product_id
                                    WHERE p.slug = $8 AND (mp.expiry_at IS NULL OR mp.expiry_at > now())))
ORDER BY m.created_at DESC, m.id DESC LIMIT $6"""

_OUTBOX = """
SELECT o.id AS outbox_id, o.event_type, o.status, o.attempts, o.payload->>'member_id' AS member_id,
       o.idempotency_key, o.last_error_code, o.next_run_at, o.created_at, o.processed_at
FROM outbox o
WHERE ($1::text IS NULL OR o.status = $1) AND ($2::timestamptz IS NULL OR o.created_at >= $2)
  AND ($3::text IS NULL OR o.payload->>'member_id' = $3)
  AND ($4::timestamptz IS NULL OR (o.created_at, o.id) < ($4, $5::text))
ORDER BY o.created_at DESC, o.id DESC LIMIT $6"""

_LISTS: dict[str, tuple[str, str, tuple[str, ...], type[Answer]]] = {  # what: (statement, table, states, row)
    "email": (_EMAILS, "emails", EMAIL_STATES, EmailRow),
    "post": (_POSTS, "posts", POST_STATES, PostRow),
    "member": (_MEMBERS, "members", MEMBER_STATES, MemberRow),
    "outbox entry": (_OUTBOX, "outbox", OUTBOX_STATES, OutboxRow),
}


def since_time(text: str | None, option: str = "--since", *, now: datetime | None = None) -> datetime | None:
    """`30m`, `24h`, `7d` ago, or an ISO 8601 time with its offset."""
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d{1,6})\s*([mhd])\s*", text)
    if match:
        unit = {"m": "minutes", "h": "hours", "d": "days"}[match.group(2)]
        return (now or datetime.now(UTC)) - timedelta(**{unit: int(match.group(1))})
    if not re.match(r"\s*\d{4}-", text):  # neither form: say both, not only the ISO time's rules
        raise BadInput(f"{option} {shorten(text.strip(), 40)!r} is not a time: give 30m, 24h, 7d (ago) or an ISO "
                       "8601 time (such as 2026-11-01T00:00:00+00:00)")
    return parse_moment(text, option)


def _state(value: str | None, states: tuple[str, ...], option: str = "--status") -> str | None:
    if value is not None and value not in states:
        raise BadInput(f"{option} {shorten(value, 40)!r} is not one of {', '.join(states)}")
    return value


async def _newsletter_id(conn, newsletter: str | None) -> str | None:
    """A newsletter named by its id or its slug."""
    if newsletter is None:
        return None
    entity_id(newsletter, "newsletter")
    found = await conn.fetchval("SELECT id FROM newsletters WHERE id = $1 OR slug = $1 ORDER BY id = $1 DESC LIMIT 1",
                                newsletter)
    if found is None:
        raise NotFound(f"newsletter {newsletter} does not exist (`pressroom newsletter list` shows the emails and "
                       "their newsletters)")
    return found


async def _label_and_tier(conn, label: str | None, tier: str | None) -> tuple[str | None, str | None]:
    """--label and --tier as slugs that exist: a typo is named, not answered with an empty list."""
    for value, what, table in ((label, "label", "labels"), (tier, "tier", "products")):
        if value is not None and not await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM {table} WHERE slug = $1)",
                                                         slug(value, what)):
            raise NotFound(f"--{what} {value}: no {what} has that slug")
    return (label.strip() if label else None), (tier.strip() if tier else None)


async def list_page(what: str, *, status: str | None = None, since: str | None = None, newsletter: str | None = None,
                    member: str | None = None, after: str | None = None, limit: int = DEFAULT_PAGE,
                    label: str | None = None, tier: str | None = None, settings: Settings | None = None) -> Page:
    """One page of a list, newest first (`next_after`: the id to pass as `after` for the next page,
    None on the last page)."""
    statement, table, states, row_model = _LISTS[what]
    if not 1 <= limit <= LARGEST_PAGE:
        raise BadInput(f"--limit {limit} is not between 1 and {LARGEST_PAGE}")
    state, start = _state(status, states), since_time(since)
    if member is not None:
        entity_id(member, "member")
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        newsletter_id = await _newsletter_id(conn, newsletter)
        cursor = None, None
        if after is not None:
            entity_id(after, what)
            row = await conn.fetchrow(f"SELECT created_at, id FROM {table} WHERE id = $1", after)
            if row is None:
                raise NotFound(f"--after {after}: no {what} has that id")
            cursor = row["created_at"], row["id"]
        audience = await _label_and_tier(conn, label, tier) if what == "member" else ()
        rows = await conn.fetch(statement, state, start, member if what == "outbox entry" else newsletter_id,
                                *cursor, limit + 1, *audience)
    items = [row_model.model_validate(dict(row)) for row in rows[:limit]]
    key = next(iter(row_model.model_fields))  # each row's first field is its id
    return Page[row_model](items=items,  # type: ignore[valid-type]  # the row model is chosen by `what`
                           next_after=getattr(items[-1], key) if len(rows) > limit else None)

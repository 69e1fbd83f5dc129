"""Members found by what an editor types: part of an address or a name, and a filter in the
recipient filter's language (`status:paid+label:vip`), newest first, a page at a time.

The walk is `members list`'s: the (created_at, id) index from the newest row, stopping after one
page, the next page starting after the last row shown; a rare search is answered from the trigram
index of schema 0071 instead (the planner chooses); the filter is the one an email's audience
uses (pressroom/recipient_filter.py parsed, pressroom/store/audience.py's SQL).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from operations.answers import MemberRow, Page
from operations.finding import DEFAULT_PAGE, LARGEST_PAGE
from pressroom import database
from pressroom.errors import BadInput, NotFound
from pressroom.inputs import entity_id
from pressroom.recipient_filter import FilterError, parse
from pressroom.settings import Settings, get_settings
from pressroom.store.audience import filter_sql

LONGEST_SEARCH = 200

_SEARCH = """
SELECT m.id AS member_id, m.email, m.name, m.status, m.email_disabled, s.reason AS suppressed,
       m.email_count, m.email_opened_count, m.email_open_rate, m.created_at
FROM members m LEFT JOIN suppressions s ON s.email = m.email
WHERE ($1::text IS NULL OR lower(m.email || ' ' || coalesce(m.name, '')) LIKE $1)
  AND ($2::timestamptz IS NULL OR (m.created_at, m.id) < ($2, $3::text))
  AND {predicate}
ORDER BY m.created_at DESC, m.id DESC LIMIT $4"""


async def search_members(text: str | None = None, recipient_filter: str | None = None, *, after: str | None = None,
                         limit: int = DEFAULT_PAGE, settings: Settings | None = None) -> Page[MemberRow]:
    """Members whose address or name holds `text` (any case) and who match the filter."""
    if not 1 <= limit <= LARGEST_PAGE:
        raise BadInput(f"the limit {limit} is not between 1 and {LARGEST_PAGE}")
    text = (text or "").strip().lower() or None
    if text is not None and len(text) > LONGEST_SEARCH:
        raise BadInput(f"the search is longer than {LONGEST_SEARCH} characters")
    pattern = None if text is None else "%" + re.sub(r"([\\%_])", r"\\\1", text) + "%"  # typed literally
    try:
        tree = parse(recipient_filter.strip()) if recipient_filter and recipient_filter.strip() else None
    except FilterError as error:
        raise BadInput(f"the filter: {error}") from None
    predicate, values = (filter_sql(tree, as_of=datetime.now(UTC), post_id=None, param=5) if tree is not None
                         else ("TRUE", []))
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        cursor = None, None
        if after is not None:
            entity_id(after, "member")
            row = await conn.fetchrow("SELECT created_at, id FROM members WHERE id = $1", after)
            if row is None:
                raise NotFound(f"after {after}: no member has that id")
            cursor = row["created_at"], row["id"]
        statement = _SEARCH.format(predicate=predicate)
        rows = await conn.fetch(statement, pattern, *cursor, limit + 1, *([values] if tree is not None else []))
    items = [MemberRow.model_validate(dict(row)) for row in rows[:limit]]
    return Page[MemberRow](items=items, next_after=items[-1].member_id if len(rows) > limit else None)

"""Who an email goes to, as SQL the lock (is there anyone?) and batch creation share.

The recipient filter becomes one predicate over `m`, the members row (pressroom/store/audience.py,
which the members search and the Admin API read too); here it meets the newsletter's subscribers,
the suppressions and the email's segments. The filter's values travel in one bound text array, $2.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from pressroom.email_rendering import SEGMENT_STATUSES, TIERS_SUFFIX
from pressroom.errors import shorten
from pressroom.recipient_filter import Node, parse, slugs
from pressroom.store.audience import AS_OF, POST, filter_sql

PREDICATE = "/* the recipient filter */ TRUE"  # where an audience's predicate goes in the SQL below
SEGMENT = "/* the member's segment */ NULL::text"  # where its segment expression goes

# The email's audience: subscribers of its newsletter whom the filter selects, who may receive
# email, are not suppressed, and existed when the email was made. $1 newsletter, $2 the filter's
# values (named even when the filter reads none of them, so that its type is known), $3 email time.
RECIPIENTS = f"""
    FROM members m
    JOIN members_newsletters mn ON mn.member_id = m.id AND mn.newsletter_id = $1
    WHERE ({PREDICATE}) AND $2::text[] IS NOT NULL AND NOT m.email_disabled AND m.created_at <= $3
      AND NOT EXISTS (SELECT 1 FROM suppressions s WHERE s.email = m.email)
"""


# The audience ($1-$3 as RECIPIENTS) counted by segment, with the ids of its members whose address
# is not of the plain shape ($4 and $6, pressroom.inputs.PLAIN_ADDRESS and PLAIN_DOMAIN_LENGTH) or is
# in a special-use domain ($5): each of those is checked by email-validator before batches are
# planned. One pass over the audience; most rows are plain. The top-level domain is what follows the
# last dot, taken without a second regular expression (a third of the statement's time at 100,000):
# for every address the pattern matches, the same text.
AUDIENCE_BY_SEGMENT = f"""
    SELECT {SEGMENT} AS segment, count(*) AS n,
           coalesce(array_agg(m.id) FILTER (WHERE NOT (
               m.email ~ $4 AND length(m.email) <= 254 AND strpos(m.email, '@') <= 65
               AND length(m.email) - strpos(m.email, '@') <= $6
               AND lower(reverse(split_part(reverse(m.email), '.', 1))) <> ALL($5::text[]))), '{{}}') AS unplain
    {RECIPIENTS}
    GROUP BY 1
"""
# Leaves out the members recorded as unusable for the email numbered `param`.
NOT_SKIPPED = ("AND NOT EXISTS (SELECT 1 FROM email_skipped_recipients x "
               "WHERE x.email_id = ${param} AND x.member_id = m.id)")

_ENTITLED = ("m.id IN (SELECT mp.member_id FROM members_products mp JOIN posts_products pp "
             f"ON pp.product_id = mp.product_id WHERE pp.post_id = {POST} "
             f"AND (mp.expiry_at IS NULL OR mp.expiry_at > {AS_OF}))")
_BY_STATUS = "CASE WHEN m.status = 'free' THEN 'status:free' ELSE 'status:-free' END"
# Readers of a post for chosen tiers: their status's segment, and whether one of their tiers is the post's.
_BY_STATUS_AND_TIER = f"{_BY_STATUS} || CASE WHEN {_ENTITLED.format(param=2)} THEN '{TIERS_SUFFIX}' ELSE '' END"
assert all(name in ("status:free", "status:-free") or name.endswith(TIERS_SUFFIX) for name in SEGMENT_STATUSES)


@dataclass(frozen=True)
class Audience:
    """An email's audience: RECIPIENTS' parameters and the SQL its filter and segments become."""

    tree: Node  # the recipient filter, parsed once
    newsletter_id: str
    values: list[str]
    created_at: datetime
    predicate: str
    segment: str  # SQL naming a member's segment: by status, and by the post's tiers when it has any

    @property
    def params(self) -> tuple:
        """RECIPIENTS' $1-$3."""
        return self.newsletter_id, self.values, self.created_at

    def sql(self, text: str) -> str:
        return text.replace(PREDICATE, self.predicate).replace(SEGMENT, self.segment)


def audience(email: asyncpg.Record, *, as_of: datetime, tiers: bool) -> Audience:
    """The audience of an email row (newsletter_id, post_id, recipient_filter, created_at), its tiers
    judged at `as_of`; `tiers`: segments also say whether a member is of one of the post's tiers.
    A filter outside the grammar raises FilterError."""
    tree = parse(email["recipient_filter"])
    predicate, values = filter_sql(tree, as_of=as_of, post_id=email["post_id"], param=2)
    return Audience(tree=tree, newsletter_id=email["newsletter_id"], values=values, created_at=email["created_at"],
                    predicate=predicate, segment=_BY_STATUS_AND_TIER if tiers else _BY_STATUS)


async def missing(conn: asyncpg.Connection, tree: Node) -> str:
    """Which labels and tiers the filter (its parsed tree) names that do not exist, in words ("" when all do)."""
    found = []
    for key, table in (("label", "labels"), ("tier", "products")):
        wanted = slugs(tree, key)
        if wanted:
            absent = await conn.fetchval(
                f"SELECT array_agg(s ORDER BY o) FROM unnest($1::text[]) WITH ORDINALITY AS w (s, o) "
                f"WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE t.slug = w.s)", wanted)
            if absent:
                found.append(f"no {key} {shorten(', '.join(absent), 200)}")
    return "; ".join(found)


async def entitled(conn: asyncpg.Connection, member_id: str, email_id: str) -> bool:
    """Whether the member is, now, of one of the tiers the email's post is for."""
    return await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM members_products mp JOIN posts_products pp ON pp.product_id = mp.product_id "
        "JOIN emails e ON e.post_id = pp.post_id WHERE e.id = $2 AND mp.member_id = $1 "
        "AND (mp.expiry_at IS NULL OR mp.expiry_at > now()))", member_id, email_id)

"""A recipient filter as SQL: the one predicate over `m`, the members row, that an email's audience,
a members search, an export and the Admin API's members browse all read.

The filter's tree (pressroom/recipient_filter.py) gives the predicate its shape; every value the
author wrote (a status, a label or tier slug) travels in one bound text array, so no filter text is
ever part of the SQL. Each label or tier term is an uncorrelated `m.id IN (...)`: PostgreSQL hashes
it once per query and probes it per member, however the terms are combined.
"""

from __future__ import annotations

from datetime import datetime

from pressroom.recipient_filter import And, Everyone, Node, Or, Term, parse

# The values array's first two: the moment tier expiry is judged at, and the email's post.
AS_OF = "(${param}::text[])[1]::timestamptz"
POST = "(${param}::text[])[2]"

_LABELLED = ("m.id IN (SELECT ml.member_id FROM members_labels ml JOIN labels l ON l.id = ml.label_id "
             "WHERE l.slug = ANY({values}))")
# A tier counts while its expiry has not passed at the audience's moment.
_OF_TIER = ("m.id IN (SELECT mp.member_id FROM members_products mp JOIN products p ON p.id = mp.product_id "
            f"WHERE p.slug = ANY({{values}}) AND (mp.expiry_at IS NULL OR mp.expiry_at > {AS_OF}))")


def filter_sql(recipient_filter: str | Node, *, as_of: datetime, post_id: str | None,
               param: int) -> tuple[str, list[str]]:
    """(the filter, as text or its parsed tree, as a predicate over `m`, the values it reads from the
    text array ${param}); a filter outside the grammar raises FilterError."""
    tree = recipient_filter if isinstance(recipient_filter, Node) else parse(recipient_filter)
    values = [as_of.isoformat(), post_id or ""]
    return _predicate(tree, values, param), values


def _predicate(tree: Node, values: list[str], param: int) -> str:
    """The tree as SQL; each term's values appended to `values` and read as a slice of the array."""
    if isinstance(tree, Everyone):
        return "TRUE"
    if isinstance(tree, (And, Or)):
        joiner = " AND " if isinstance(tree, And) else " OR "
        return "(" + joiner.join(_predicate(part, values, param) for part in tree.parts) + ")"
    assert isinstance(tree, Term)
    first = len(values) + 1
    values.extend(tree.values)
    chosen = f"(${param}::text[])[{first}:{len(values)}]"
    sql = {"status": f"m.status = ANY({chosen})", "label": _LABELLED.format(values=chosen),
           "tier": _OF_TIER.format(values=chosen, param=param)}[tree.key]
    return f"NOT ({sql})" if tree.negated else f"({sql})"

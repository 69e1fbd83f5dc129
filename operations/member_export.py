"""`members export [FILE] [--filter F]`: members in the reference platform's CSV export format.

The columns and their order are those @tryghost/members-csv writes (its `unparse`), so the
reference's importer, its CSV library and `members import` read the file back: id, email, name,
note, subscribed_to_emails, complimentary_plan, stripe_customer_id, created_at, deleted_at, labels
(names, comma-separated), tiers (names), gift_id. Pressroom keeps no Stripe customer nor gift, so
those cells are empty; a paid member is written with their tiers, which is how `members import`
knows them paid again.

Cells that a spreadsheet would run as a formula (starting with = + - @, a tab or a carriage
return) are written after a `'`, as the reference does (papaparse's escapeFormulae, OWASP's advice
for CSV injection); `members import` takes the guard off again.

Streamed: rows come from a server-side cursor and go to the file as they come, so memory does not
grow with the site. A file is written beside its name and renamed when complete: an export that
fails leaves no half file.
"""

from __future__ import annotations

import csv
import os
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from activities.newsletter.audience import missing
from pressroom import database, tracing
from pressroom.errors import BadInput
from pressroom.recipient_filter import FilterError, parse
from pressroom.settings import Settings, get_settings
from pressroom.store.audience import filter_sql

COLUMNS = ("id", "email", "name", "note", "subscribed_to_emails", "complimentary_plan", "stripe_customer_id",
           "created_at", "deleted_at", "labels", "tiers", "gift_id")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
PREFETCH = 2000  # rows the cursor fetches at a time

# A member's labels (in the order the site gave them) and the tiers they hold now, by name, as the
# reference's export writes them; subscribed: on at least one newsletter.
_MEMBERS = """
SELECT m.id, m.email, m.name, m.note, m.status, m.created_at,
       EXISTS (SELECT 1 FROM members_newsletters mn WHERE mn.member_id = m.id) AS subscribed,
       (SELECT string_agg(l.name, ',' ORDER BY ml.sort_order, l.name) FROM members_labels ml
        JOIN labels l ON l.id = ml.label_id WHERE ml.member_id = m.id) AS labels,
       (SELECT string_agg(p.name, ',' ORDER BY p.name) FROM members_products mp
        JOIN products p ON p.id = mp.product_id
        WHERE mp.member_id = m.id AND (mp.expiry_at IS NULL OR mp.expiry_at > now())) AS tiers
FROM members m WHERE {predicate}
ORDER BY m.created_at, m.id"""


@dataclass(frozen=True)
class MembersExported:
    file: str  # "-": standard output
    members: int
    filter: str | None
    paid_without_tier: int  # paid members the format cannot say are paid (no tier, no Stripe customer)


def guarded(value: str) -> str:
    """A cell a spreadsheet would not run as a formula."""
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def _cells(row) -> list[str]:
    created = row["created_at"].astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    cells = [row["id"], row["email"], row["name"] or "", row["note"] or "",
             "true" if row["subscribed"] else "false", "true" if row["status"] == "comped" else "false", "",
             created, "", row["labels"] or "", row["tiers"] or "", ""]
    return [guarded(cell) for cell in cells]


@tracing.traced("pressroom members export")
async def export_members(file: str | Path = "-", *, recipient_filter: str | None = None,
                         settings: Settings | None = None) -> MembersExported:
    """Write the members (those the filter selects, or all) to FILE ("-": standard output)."""
    try:
        tree = parse(recipient_filter or "all")
    except FilterError as error:
        raise BadInput(str(error)) from None
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        absent = await missing(conn, tree)
        if absent:
            raise BadInput(f"--filter names {absent}")
        predicate, values = filter_sql(tree, as_of=datetime.now(UTC), post_id=None, param=1)
        if str(file) == "-":
            return await _write(conn, sys.stdout, predicate, values, "-", recipient_filter)
        target = Path(file)
        partial = target.with_name(target.name + ".partial")
        try:
            with partial.open("w", newline="", encoding="utf-8") as handle:
                done = await _write(conn, handle, predicate, values, str(target), recipient_filter)
            os.replace(partial, target)
        except OSError as error:
            raise BadInput(f"{target} cannot be written: {error.strerror or error}") from None
        finally:
            partial.unlink(missing_ok=True)
        return done


async def _write(conn, handle: TextIO, predicate: str, values: list[str], name: str,
                 recipient_filter: str | None) -> MembersExported:
    writer = csv.writer(handle, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    count = paid_without_tier = 0
    arguments = [values] if "$1" in predicate else []  # `all` reads no value
    async with conn.transaction():  # a cursor lives in a transaction
        async for row in conn.cursor(_MEMBERS.format(predicate=predicate), *arguments, prefetch=PREFETCH):
            writer.writerow(_cells(row))
            count += 1
            paid_without_tier += row["status"] == "paid" and not row["tiers"]
    handle.flush()
    return MembersExported(name, count, recipient_filter, paid_without_tier)

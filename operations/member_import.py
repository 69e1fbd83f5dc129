"""`members import FILE.csv`: a member list in the reference platform's export format.

Its columns are id, email, name, note, subscribed_to_emails, complimentary_plan, stripe_customer_id,
created_at, deleted_at, labels, tiers; other exports say `subscribed` and `status`. The file is
outside input: every row is checked on its own (the csv module reads it; addresses as `members add`
checks them, pressroom.inputs.email_address), a refused row is set aside with its line and why
(never its address) and the rest goes in. Rows are written in one transaction, a chunk at a time:
COPY into a temporary table, then set-based statements match each row to a member by its address
whatever its case, update those that exist and insert the others; labels go into the reference
platform's labels and members_labels (made from the file's names, by slug; a member keeps labels the
file does not name). Tiers are the site's and are not imported. Importing the same file again
changes nothing. No welcome email unless asked for: a site moving its list here has welcomed them.
"""

from __future__ import annotations

import csv
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from pressroom import tracing
from pressroom.errors import BadInput
from pressroom.settings import Settings, get_settings

CHUNK = 20_000  # rows per COPY and per set of statements: a progress step, and bounded memory in PostgreSQL
NOTE_LIMIT = 2000  # the reference platform's width of a member's note
ROWS_SHOWN = 50  # refused rows the text report lists; --json lists them all
TRUE, FALSE = {"true", "1", "yes", "y", "t"}, {"false", "0", "no", "n", "f"}
USED = ("email", "name", "note", "subscribed_to_emails", "subscribed", "complimentary_plan", "status", "created_at",
        "labels")


@dataclass
class ImportReport:
    file: str
    rows: int = 0  # data rows read (the header not counted)
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    refused: list[dict] = field(default_factory=list)  # {line, reason}, in file order
    ignored_columns: list[str] = field(default_factory=list)
    labels_made: int = 0  # labels the site did not have (made from the file's names)
    labels_given: int = 0  # members' labels added (a label a member already had is not counted)
    suppressions_restored: int = 0
    welcome_queued: int = 0


@dataclass(frozen=True)
class _Row:
    line: int
    email: str
    name: str | None
    note: str | None
    subscribed: bool | None  # None: not said (a new member gets the signup newsletters, one that exists keeps hers)
    status: str | None  # None: not said (a new member is free, one that exists keeps hers)
    created_at: datetime | None
    labels: tuple[tuple[str, str], ...]  # (name as written, slug)


def _flag(value: str, column: str) -> bool | None:
    word = value.strip().lower()
    if not word:
        return None
    if word in TRUE:
        return True
    if word in FALSE:
        return False
    raise BadInput(f"{column} is neither true nor false")


def _slug(label: str) -> str:
    """A label's slug as the reference platform makes one: lower case ASCII words joined by hyphens."""
    text = unicodedata.normalize("NFKD", label).encode("ascii", "ignore").decode().lower()
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def _row(line: int, cells: dict[str, str]) -> _Row:
    """One row checked; BadInput names what is wrong (never the address, the name or the note)."""
    from pressroom.inputs import email_address, free_text, moment

    if any("\udc80" <= c <= "\udcff" for value in cells.values() for c in value):
        raise BadInput("holds bytes that are not UTF-8")
    if not cells.get("email", "").strip():
        raise BadInput("no email")
    email = email_address(cells["email"], "the email")
    name = free_text(cells.get("name"), "name")
    note = (cells.get("note") or "").strip() or None
    if note is not None:
        if len(note) > NOTE_LIMIT:
            raise BadInput(f"the note is {len(note):,} characters long; at most {NOTE_LIMIT}")
        if any(not c.isprintable() and c not in "\n\r\t" for c in note):
            raise BadInput("the note contains a control or invisible character")
    column = "subscribed_to_emails" if "subscribed_to_emails" in cells else "subscribed"
    subscribed = _flag(cells.get(column, ""), column)
    status = (cells.get("status") or "").strip().lower() or None
    if status is not None and status not in ("free", "paid", "comped"):
        raise BadInput("status is not one of free, paid, comped")
    if status is None and _flag(cells.get("complimentary_plan", ""), "complimentary_plan"):
        status = "comped"
    created = (cells.get("created_at") or "").strip()
    created_at = moment(created, "created_at") if created else None
    labels = {}
    for label in (cells.get("labels") or "").split(","):
        if label.strip():
            label = free_text(label, "label") or ""
            slug = _slug(label)
            if not slug:
                raise BadInput("a label has no letter or digit to make its slug of")
            labels.setdefault(slug, label)
    return _Row(line, email, name, note, subscribed, status, created_at,
                tuple((label, slug) for slug, label in labels.items()))


def read_rows(path: Path, report: ImportReport, progress: Callable[[int], None] | None = None) -> list[_Row]:
    """The file's rows that can be imported; refused ones go into the report with their line and why."""
    try:
        handle = path.open(encoding="utf-8-sig", errors="surrogateescape", newline="")
    except OSError as error:
        raise BadInput(f"{path} cannot be read: {error.strerror or error}") from None
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            raise BadInput(f"{path} is empty: the first line must name the columns (email, name, …)") from None
        except csv.Error as error:
            raise BadInput(f"{path}: the header line is not CSV ({error})") from None
        columns = [name.strip().lower() for name in header]
        if "email" not in columns:
            raise BadInput(f"{path} has no email column: the first line must name the columns (email, name, …)")
        duplicated = sorted({name for name in columns if columns.count(name) > 1 and name})
        if duplicated:
            raise BadInput(f"{path} names the column {duplicated[0]} twice")
        report.ignored_columns = [name for name in columns if name and name not in USED]
        rows, seen = [], {}
        while True:
            line = reader.line_num + 1
            try:
                cells = next(reader)
            except StopIteration:
                break
            except csv.Error as error:
                report.rows += 1
                report.refused.append({"line": line, "reason": f"not CSV ({error})"})
                continue
            if not any(cell.strip() for cell in cells):
                continue  # a blank line, as spreadsheets leave at the end
            report.rows += 1
            if progress and report.rows % 5000 == 0:
                progress(report.rows)
            if len(cells) != len(columns):
                report.refused.append({"line": line, "reason": f"has {len(cells)} cells; the header names "
                                                                f"{len(columns)} columns"})
                continue
            try:
                row = _row(line, dict(zip(columns, cells)))
            except BadInput as error:
                report.refused.append({"line": line, "reason": str(error)})
                continue
            earlier = seen.setdefault(row.email.lower(), line)
            if earlier != line:
                report.refused.append({"line": line, "reason": f"the same email as line {earlier}"})
                continue
            rows.append(row)
    return rows


# The chunk's rows, matched to members by address whatever its case, once (`member_id`); an existing
# member takes what the row says (an empty cell says nothing); the others are inserted (`added`).
# Every later statement joins the chunk by member id.
_STAGE = """CREATE TEMP TABLE member_import (line int, email text, name text, note text, subscribed boolean,
            status text, created_at timestamptz, member_id text, added boolean NOT NULL DEFAULT false)
            ON COMMIT DROP"""
_STAGE_LABELS = "CREATE TEMP TABLE member_import_labels (line int, name text, slug text) ON COMMIT DROP"
_MATCH = "UPDATE member_import i SET member_id = m.id FROM members m WHERE lower(m.email) = lower(i.email)"
_UPDATE = """
UPDATE members m SET name = coalesce(i.name, m.name), note = coalesce(i.note, m.note),
       status = coalesce(i.status, m.status), updated_at = now()
FROM member_import i
WHERE m.id = i.member_id
  AND (m.name, m.note, m.status) IS DISTINCT FROM (coalesce(i.name, m.name), coalesce(i.note, m.note),
                                                    coalesce(i.status, m.status))
RETURNING m.id"""
_INSERT = """
WITH added AS (
    INSERT INTO members (email, name, note, status, created_at)
    SELECT i.email, i.name, i.note, coalesce(i.status, 'free'), coalesce(i.created_at, now())
    FROM member_import i WHERE i.member_id IS NULL
    ON CONFLICT (email) DO NOTHING
    RETURNING id, email)
UPDATE member_import i SET member_id = added.id, added = true FROM added WHERE i.email = added.email
RETURNING i.member_id"""
# Subscriptions: `subscribed` true gives a member the newsletters new members get (subscribe on
# signup, active) and leaves the others; false takes them off every newsletter; not said, a new
# member gets the signup newsletters and one that existed keeps hers.
_SUBSCRIBE = """
INSERT INTO members_newsletters (member_id, newsletter_id)
SELECT i.member_id, n.id FROM member_import i CROSS JOIN newsletters n
WHERE n.subscribe_on_signup AND n.status = 'active' AND i.member_id IS NOT NULL
  AND (i.subscribed OR (i.subscribed IS NULL AND i.added))
ON CONFLICT (member_id, newsletter_id) DO NOTHING
RETURNING member_id"""
_UNSUBSCRIBE = """
DELETE FROM members_newsletters mn USING member_import i WHERE NOT i.subscribed AND mn.member_id = i.member_id
RETURNING mn.member_id"""
# The chunk's members' addresses as stored (a suppression is matched to a member's address exactly).
_STORED = "SELECT m.email FROM member_import i JOIN members m ON m.id = i.member_id"
_NOT_SUPPRESSED = """
SELECT m.id FROM members m
WHERE m.id = ANY($1::text[]) AND NOT EXISTS (SELECT 1 FROM suppressions s WHERE s.email = m.email) ORDER BY m.id"""
# Labels in the reference platform's tables: one the site does not have is made with the file's name
# for it (the first row's spelling); a member gets the row's labels and keeps the others.
_MAKE_LABELS = """
INSERT INTO labels (name, slug) SELECT DISTINCT ON (slug) name, slug FROM member_import_labels ORDER BY slug
ON CONFLICT (slug) DO NOTHING
RETURNING id"""
_GIVE_LABELS = """
INSERT INTO members_labels (member_id, label_id)
SELECT i.member_id, l.id FROM member_import_labels x JOIN member_import i ON i.line = x.line
JOIN labels l ON l.slug = x.slug WHERE i.member_id IS NOT NULL
ON CONFLICT (member_id, label_id) DO NOTHING
RETURNING member_id"""


@tracing.traced("pressroom members import")
async def import_members(path: str | Path, *, welcome: bool = False, settings: Settings | None = None,
                         progress: Callable[[str, int, int], None] | None = None) -> ImportReport:
    """Import the file; `progress(phase, done, total)` is told how far reading and writing have got."""
    from activities.outbox import enqueue_many
    from operations.members import member_created, restore_suppressions
    from pressroom import database

    path = Path(path)
    settings = settings or get_settings()
    report = ImportReport(file=str(path))
    rows = read_rows(path, report, (lambda n: progress("read", n, 0)) if progress else None)
    if progress:
        progress("read", report.rows, report.rows)
    key = settings.address_hash_key.get_secret_value()
    async with database.connection(settings.require_database()) as conn, conn.transaction():
        await conn.execute(_STAGE)
        await conn.execute(_STAGE_LABELS)
        new_ids: list[str] = []
        for start in range(0, len(rows), CHUNK):
            chunk = rows[start:start + CHUNK]
            await conn.copy_records_to_table(
                "member_import", records=[(r.line, r.email, r.name, r.note, r.subscribed, r.status, r.created_at)
                                          for r in chunk],
                columns=["line", "email", "name", "note", "subscribed", "status", "created_at"])
            labels = [(r.line, name, slug) for r in chunk for name, slug in r.labels]
            if labels:
                await conn.copy_records_to_table("member_import_labels", records=labels)
            # Without statistics the planner takes the temporary tables for a few rows, and joins
            # each statement below by nested loops.
            await conn.execute("ANALYZE member_import, member_import_labels")
            await conn.execute(_MATCH)
            updated = await conn.fetch(_UPDATE)
            ids = [row["member_id"] for row in await conn.fetch(_INSERT)]
            moved = {row["member_id"] for row in await conn.fetch(_SUBSCRIBE)}
            if any(r.subscribed is False for r in chunk):
                moved |= {row["member_id"] for row in await conn.fetch(_UNSUBSCRIBE)}
            if key:  # the suppressions of deleted members whose address comes back
                stored = [row["email"] for row in await conn.fetch(_STORED)]
                report.suppressions_restored += await restore_suppressions(conn, stored, settings)
            if labels:
                report.labels_made += len(await conn.fetch(_MAKE_LABELS))
                labelled = [row["member_id"] for row in await conn.fetch(_GIVE_LABELS)]
                report.labels_given += len(labelled)
                moved |= set(labelled)
            changed = {row["id"] for row in updated} | moved
            report.added += len(ids)
            report.updated += len(changed - set(ids))
            new_ids += ids
            await conn.execute("TRUNCATE member_import, member_import_labels")
            if progress:
                progress("write", start + len(chunk), len(rows))
        report.unchanged = len(rows) - report.added - report.updated
        if welcome and settings.welcome_emails and new_ids:
            # Never an address a bounce or a complaint suppressed (a deleted member's, come back).
            new_ids = [row["id"] for row in await conn.fetch(_NOT_SUPPRESSED, new_ids)]
            report.welcome_queued = await enqueue_many(conn, "MemberCreatedEvent",
                                                       [member_created(member_id) for member_id in new_ids])
    return report

"""`members import FILE.csv`: a member list in the reference platform's export format, or Mailchimp's.

The reference's columns are id, email, name, note, subscribed_to_emails, complimentary_plan,
stripe_customer_id, created_at, deleted_at, labels, tiers (and import_tier, which its importer
reads); other exports say `subscribed` and `status`. A Mailchimp audience export ("Email Address",
"First Name", "Last Name", "TAGS", "OPTIN_TIME", …) is recognised by its header and read in the
same terms. The file is outside input: every row is checked on its own (the csv module reads it;
addresses as `members add` checks them, pressroom.inputs.email_address), a refused row is set
aside with its line and why (never its address) and the rest goes in.

The file is streamed: rows are read, checked and written a chunk at a time, in one transaction
(COPY into a temporary table, then set-based statements match each row to a member by its address
whatever its case and update those that exist; the others are COPYed into members with their
subscriptions), so memory does not grow with the file; the next chunk is read and checked in a
thread while one is written. Labels go into the reference platform's labels and members_labels (found by name or
slug, made from the file's names with the reference's slugs; a member keeps labels the file does
not name). Tiers are the site's: named ones are given, never made. Importing the same file again
changes nothing. No welcome email unless asked for: a site moving its list here has welcomed them.
A dry run does all of it and rolls the transaction back.

What the reference's importer does, and so this one: a complimentary member gets the site's
default tier; a created_at in the future becomes the import's time. Where Pressroom cannot do
what it does (a Stripe customer's status comes from Stripe), the report says what was done instead.
"""

from __future__ import annotations

import asyncio
import csv
import os
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import asyncpg
from text_unidecode import unidecode

from operations.members import restore_suppressions, welcome_added_members
from pressroom import database, tracing
from pressroom.errors import BadInput, PressroomError
from pressroom.inputs import MAX_LABELS, email_address, free_text, moment
from pressroom.settings import Settings, get_settings

CHUNK = 20_000  # rows per COPY and per set of statements: a progress step, and bounded memory
NOTE_LIMIT = 2000  # the reference platform's width of a member's note
ROWS_SHOWN = 50  # refused rows the text report lists; --json lists them all
TRUE, FALSE = {"true", "1", "yes", "y", "t"}, {"false", "0", "no", "n", "f"}
REFERENCE, MAILCHIMP = "the reference platform's export", "a Mailchimp export"
# The reference's export guards cells against spreadsheet formulas with a leading ' (papaparse's
# escapeFormulae); reading its file back, the guard goes.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# A byte that was not UTF-8, as the file is read (errors="surrogateescape").
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


@dataclass
class ImportReport:
    file: str
    format: str = REFERENCE  # which kind of file was read (from its header)
    dry_run: bool = False  # nothing was written: every figure says what an import would do
    rows: int = 0  # data rows read (the header not counted)
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    refused: list[dict] = field(default_factory=list)  # {line, reason}, in file order
    ignored_columns: list[str] = field(default_factory=list)
    labels_made: int = 0  # labels the site did not have (made from the file's names)
    labels_given: int = 0  # members' labels added (a label a member already had is not counted)
    tiers_given: int = 0  # members' tiers added
    comped_default_tier: int = 0  # complimentary members given the site's default tier
    comped_without_tier: int = 0  # complimentary members left without a tier: the site has no paid tier
    paid_stripe: int = 0  # members with a Stripe customer and a tier, imported paid with it
    stripe_without_tier: list[int] = field(default_factory=list)  # lines: a Stripe customer, no tier: free
    created_in_future: int = 0  # created_at after the import's time: the import's time kept instead
    suppressions_restored: int = 0
    welcome_queued: int = 0


class _Row(NamedTuple):  # a tuple: made once a row, a frozen dataclass's checks cost more than the row's
    line: int
    email: str
    name: str | None
    note: str | None
    subscribed: bool | None  # None: not said (a new member gets the signup newsletters, one that exists keeps hers)
    status: str | None  # None: not said (a new member is free, one that exists keeps hers)
    created_at: datetime | None
    labels: tuple[tuple[str, str], ...]  # (name as written, slug)
    tiers: tuple[str, ...]  # tier names or slugs as written
    default_tier: bool  # complimentary without a tier named: the site's default tier
    stripe: bool  # the row names a Stripe customer
    future: bool  # created_at was after the import's time


@dataclass(frozen=True)
class _Format:
    name: str
    used: tuple[str, ...]  # the columns read (lower case)
    # The row's cells by column → the reference's terms: its cells, and its labels' names.
    cells: Callable[[dict[str, str]], tuple[dict[str, str], list[str]]]


def _reference_cells(cells: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    return cells, (cells.get("labels") or "").split(",")


def _mailchimp_cells(cells: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """A Mailchimp row in the reference's terms: its TAGS cell is itself a list of quoted tags
    ("a","b, c"); a row of its unsubscribed or cleaned export is not subscribed."""
    name = " ".join(part for part in (cells.get("first name", "").strip(), cells.get("last name", "").strip()) if part)
    tags = cells.get("tags", "").strip()
    created = (cells.get("confirm_time") or cells.get("optin_time") or "").strip()
    if created and not re.search(r"(Z|[+-]\d\d:?\d\d)$", created):
        created += "+00:00"  # Mailchimp writes its times in UTC, without saying so
    left = bool((cells.get("unsub_time") or "").strip() or (cells.get("clean_time") or "").strip())
    return ({"email": cells.get("email address", ""), "name": name, "note": cells.get("notes", ""),
             "created_at": created, "subscribed": "false" if left else "", "tags": tags},
            next(csv.reader([tags]), []) if tags else [])


FORMATS = {
    REFERENCE: _Format(REFERENCE, ("email", "name", "note", "subscribed_to_emails", "subscribed",
                                   "complimentary_plan", "stripe_customer_id", "status", "created_at", "labels",
                                   "tiers", "import_tier"), _reference_cells),
    MAILCHIMP: _Format(MAILCHIMP, ("email address", "first name", "last name", "tags", "optin_time", "confirm_time",
                                   "unsub_time", "clean_time", "notes"), _mailchimp_cells),
}


def _format_of(columns: list[str]) -> _Format | None:
    if "email" in columns:
        return FORMATS[REFERENCE]
    if "email address" in columns:
        return FORMATS[MAILCHIMP]
    return None


def _flag(value: object, column: str) -> bool | None:
    word = str(value or "").strip().lower()
    if not word:
        return None
    if word in TRUE:
        return True
    if word in FALSE:
        return False
    raise BadInput(f"{column} is neither true nor false")


def slugify(text: str) -> str:
    """A slug as the reference platform makes one (its @tryghost/string slugify): invisible
    characters dropped, the rest transliterated to ASCII (text-unidecode, the port of the same Perl
    tables), URL-reserved characters and spaces made hyphens, apostrophes dropped, lower case,
    hyphens collapsed and trimmed. `_` stays, `ø` is `o`, `ß` is `ss`, "Editor's Picks" is
    `editors-picks`."""
    text = "".join(c for c in text if unicodedata.category(c) not in ("Cc", "Cf", "Co", "Cn"))
    text = unidecode(text.replace("£", "-"))
    text = re.sub(r"[\s.@:/?#\[\]!$&()*+,;=\\%<>|^~\"{}`–—]", "-", text).replace("'", "").lower()
    return re.sub(r"-+", "-", text).strip("-").strip()


def _unguarded(value: str) -> str:
    return value[1:] if value[:1] == "'" and value[1:2] and value[1:2] in FORMULA_STARTS else value


def _row(line: int, cells: tuple[dict[str, str], list[str]], now: datetime) -> _Row:
    """One row checked; BadInput names what is wrong (never the address, the name or the note)."""
    text, labels_cell = cells
    if _NOT_UTF8.search("".join(text.values())):  # the labels' names are read from these cells
        raise BadInput("holds bytes that are not UTF-8")
    if not text.get("email", "").strip():
        raise BadInput("no email")
    email = email_address(text["email"], "the email")
    name = free_text(_unguarded(text.get("name") or ""), "name")
    note = _unguarded((text.get("note") or "").strip()) or None
    if note is not None:
        if len(note) > NOTE_LIMIT:
            raise BadInput(f"the note is {len(note):,} characters long; at most {NOTE_LIMIT}")
        if not note.isprintable() and any(not c.isprintable() and c not in "\n\r\t" for c in note):
            raise BadInput("the note contains a control or invisible character")
    column = "subscribed_to_emails" if "subscribed_to_emails" in text else "subscribed"
    subscribed = _flag(text.get(column), column)
    status = (text.get("status") or "").strip().lower() or None
    if status is not None and status not in ("free", "paid", "comped"):
        raise BadInput("status is not one of free, paid, comped")
    comped = _flag(text.get("complimentary_plan"), "complimentary_plan")
    stripe = bool((text.get("stripe_customer_id") or "").strip())
    import_tier = (text.get("import_tier") or "").strip()
    tiers = tuple(dict.fromkeys(t.strip() for t in ([import_tier] if import_tier else
                                                      (text.get("tiers") or "").split(",")) if t.strip()))
    if import_tier and not (comped or stripe or status in ("paid", "comped")):
        raise BadInput("a free member cannot be imported with a tier (import_tier), as in the reference")
    if status is None:
        # The reference's order: a Stripe customer's status is Stripe's (here: paid when the row names
        # their tier); complimentary is comped; a tier named without either is a paid member's
        # (Pressroom's own export writes paid members so).
        status = ("paid" if tiers else None) if stripe else "comped" if comped else "paid" if tiers else None
    if status == "free" and tiers:
        raise BadInput("a free member cannot be imported with a tier")
    created = (text.get("created_at") or "").strip()
    created_at = moment(created, "created_at") if created else None
    future = created_at is not None and created_at > now
    labels: dict[str, str] = {}
    for label in labels_cell:
        if label.strip():
            label = free_text(label, "label") or ""
            slug = slugify(label)[:191]
            if not slug:
                raise BadInput("a label has no letter or digit to make its slug of")
            labels.setdefault(slug, label)
    if len(labels) > MAX_LABELS:
        raise BadInput(f"names {len(labels):,} labels; a member has at most {MAX_LABELS}")
    return _Row(line, email, name, note, subscribed, status, now if future or created_at is None else created_at,
                tuple((label, slug) for slug, label in labels.items()), tiers,
                default_tier=status == "comped" and not tiers, stripe=stripe, future=future)


def read_rows(path: Path, report: ImportReport, now: datetime) -> Iterator[_Row | dict]:
    """The file's rows, one at a time: each a checked row, or {line, reason} for one refused."""
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
        kind = _format_of(columns)
        if kind is None:
            raise BadInput(f"{path} has no email column: the first line must name the columns (email, name, …; "
                           "or a Mailchimp export's Email Address, First Name, …)")
        duplicated = sorted({name for name in columns if columns.count(name) > 1 and name})
        if duplicated:
            raise BadInput(f"{path} names the column {duplicated[0]} twice")
        report.format = kind.name
        report.ignored_columns = [name for name in columns if name and name not in kind.used]
        while True:
            line = reader.line_num + 1
            try:
                cells = next(reader)
            except StopIteration:
                return
            except csv.Error as error:
                report.rows += 1
                yield {"line": line, "reason": f"not CSV ({error})"}
                continue
            if not any(cell.strip() for cell in cells):
                continue  # a blank line, as spreadsheets leave at the end
            report.rows += 1
            if len(cells) != len(columns):
                yield {"line": line, "reason": f"has {len(cells)} cells; the header names {len(columns)} columns"}
                continue
            try:
                yield _row(line, kind.cells(dict(zip(columns, cells, strict=True))), now)
            except BadInput as error:
                yield {"line": line, "reason": str(error)}


# The chunk's rows, each with a new member's id made by the client, matched to members by address
# whatever its case, once (`member_id` becomes the member's, `added` false); an existing member
# takes what the row says (an empty cell says nothing); the others (`added`) are COPYed into
# members, their subscriptions with them: a new member's id conflicts with nothing, and COPY writes
# rows in batches where INSERT … SELECT writes them one by one. Every later statement joins the
# chunk by member id. `member_import_seen` keeps every address of the file so far (the earlier
# chunks' are no longer in memory), to refuse a second row of one.
_STAGE = """CREATE TEMP TABLE member_import (line int, email text, name text, note text, subscribed boolean,
            status text, created_at timestamptz, tier_ids text[], member_id text NOT NULL,
            added boolean NOT NULL DEFAULT true) ON COMMIT DROP"""
_STAGE_LABELS = """CREATE TEMP TABLE member_import_labels (line int, name text, slug text, label_id text)
                   ON COMMIT DROP"""
_STAGE_SEEN = "CREATE TEMP TABLE member_import_seen (email text PRIMARY KEY, line int) ON COMMIT DROP"
# Both look each row's address up by index (LATERAL … LIMIT 1): as a join, the planner hashed the
# chunk and read every member (or every address seen) for each chunk, a time that grew with the file.
_SEEN_BEFORE = """
DELETE FROM member_import i
USING member_import c CROSS JOIN LATERAL (
    SELECT s.line FROM member_import_seen s WHERE s.email = lower(c.email) LIMIT 1) s
WHERE i.line = c.line
RETURNING i.line, s.line AS earlier"""
_SEEN = "INSERT INTO member_import_seen SELECT lower(email), line FROM member_import"
_MATCH = """
UPDATE member_import i SET member_id = m.id, added = false
FROM member_import c CROSS JOIN LATERAL (
    SELECT m.id FROM members m WHERE lower(m.email) = lower(c.email) LIMIT 1) m
WHERE i.line = c.line"""
_MATCHED = "SELECT line FROM member_import WHERE NOT added"
# A label is the site's label of that name (any case), or of that slug; otherwise it is new.
_FIND_LABELS = [
    """UPDATE member_import_labels x SET label_id = l.id FROM labels l
       WHERE x.label_id IS NULL AND lower(l.name) = lower(x.name)""",
    "UPDATE member_import_labels x SET label_id = l.id FROM labels l WHERE x.label_id IS NULL AND l.slug = x.slug"]
# Rows that would leave their (existing) member with more than $1 labels: the labels the row adds
# (new ones, and the site's that the member has not got), over what the member has.
_TOO_MANY_LABELS = """
WITH adding AS (
    SELECT i.line, i.member_id, count(*) AS n
    FROM member_import_labels x JOIN member_import i ON i.line = x.line
    WHERE NOT i.added AND NOT EXISTS (
        SELECT 1 FROM members_labels ml WHERE ml.member_id = i.member_id AND ml.label_id = x.label_id)
    GROUP BY i.line, i.member_id)
SELECT a.line FROM adding a
WHERE a.n + (SELECT count(*) FROM members_labels ml WHERE ml.member_id = a.member_id) > $1"""
_DROP_LINES = ["DELETE FROM member_import WHERE line = ANY($1::int[])",
               "DELETE FROM member_import_labels WHERE line = ANY($1::int[])"]
_UPDATE = """
UPDATE members m SET name = coalesce(i.name, m.name), note = coalesce(i.note, m.note),
       status = coalesce(i.status, m.status), updated_at = now()
FROM member_import i
WHERE m.id = i.member_id AND NOT i.added
  AND (m.name, m.note, m.status) IS DISTINCT FROM (coalesce(i.name, m.name), coalesce(i.note, m.note),
                                                    coalesce(i.status, m.status))
RETURNING m.id"""
_NEW_MEMBER_COLUMNS = ["id", "email", "name", "note", "status", "created_at"]
# Subscriptions: `subscribed` true gives a member the newsletters new members get (subscribe on
# signup, active) and leaves the others; false takes them off every newsletter; not said, a new
# member gets the signup newsletters and one that existed keeps hers.
_SIGNUP_NEWSLETTERS = "SELECT id FROM newsletters WHERE subscribe_on_signup AND status = 'active' ORDER BY id"
_SUBSCRIBE = """
INSERT INTO members_newsletters (member_id, newsletter_id)
SELECT i.member_id, n.id FROM member_import i CROSS JOIN newsletters n
WHERE n.subscribe_on_signup AND n.status = 'active' AND NOT i.added AND i.subscribed
ON CONFLICT (member_id, newsletter_id) DO NOTHING
RETURNING member_id"""
_UNSUBSCRIBE = """
DELETE FROM members_newsletters mn USING member_import i
WHERE NOT i.added AND NOT i.subscribed AND mn.member_id = i.member_id
RETURNING mn.member_id"""
_GIVE_TIERS = """
INSERT INTO members_products (member_id, product_id)
SELECT i.member_id, t.id FROM member_import i CROSS JOIN unnest(i.tier_ids) AS t(id)
ON CONFLICT (member_id, product_id) DO NOTHING
RETURNING member_id"""
# The chunk's members' addresses as stored (a suppression is matched to a member's address exactly).
_STORED = "SELECT m.email FROM member_import i JOIN members m ON m.id = i.member_id"
# The chunk's new members, but those whose address a bounce or a complaint suppressed (a deleted
# member's, come back): the address staged is the address stored.
_ADDED_NOT_SUPPRESSED = """
SELECT i.member_id FROM member_import i
WHERE i.added AND NOT EXISTS (SELECT 1 FROM suppressions s WHERE s.email = i.email) ORDER BY i.line"""
# A label the site does not have is made with the file's name for it (the first row's spelling).
_MAKE_LABELS = """
INSERT INTO labels (name, slug)
SELECT DISTINCT ON (slug) name, slug FROM member_import_labels WHERE label_id IS NULL ORDER BY slug, line
ON CONFLICT (slug) DO NOTHING
RETURNING id"""
_GIVE_LABELS = """
INSERT INTO members_labels (member_id, label_id)
SELECT i.member_id, x.label_id FROM member_import_labels x JOIN member_import i ON i.line = x.line
ON CONFLICT (member_id, label_id) DO NOTHING
RETURNING member_id"""
# The reference's default tier: its first active paid tier.
_DEFAULT_TIER = "SELECT id FROM products WHERE type = 'paid' AND active ORDER BY created_at, id LIMIT 1"


class _Tiers:
    """The site's tiers, by name (any case) and slug, read once: a file names them by name."""

    def __init__(self, rows, default: str | None) -> None:
        self.by_word = {row["slug"]: row["id"] for row in rows} | {row["name"].lower(): row["id"] for row in rows}
        self.default = default

    def ids(self, row: _Row) -> list[str] | None:
        """The row's tier ids (None: none to give); BadInput names a tier the site does not have."""
        if row.default_tier:
            return [self.default] if self.default else None
        unknown = [t for t in row.tiers if t.lower() not in self.by_word]
        if unknown:
            raise BadInput(f"the site has no tier {unknown[0]!r}")
        return [self.by_word[t.lower()] for t in row.tiers] or None


@tracing.traced("pressroom members import")
async def import_members(path: str | Path, *, welcome: bool = False, dry_run: bool = False,
                         settings: Settings | None = None,
                         progress: Callable[[str, int, int], None] | None = None) -> ImportReport:
    """Import the file (with `dry_run`, check and count everything and write nothing);
    `progress(phase, done, total)` is told how many rows have been read and written."""
    path = Path(path)
    settings = settings or get_settings()
    report = ImportReport(file=str(path), dry_run=dry_run)
    now = datetime.now(UTC)
    rows = read_rows(path, report, now)
    first = next(rows, None)  # the header is read (and a file that is no member list refused) before connecting
    async with database.connection(settings.require_database()) as conn:
        transaction = conn.transaction()
        await transaction.start()
        try:
            await _import(conn, first, rows, report, welcome=welcome, settings=settings, progress=progress)
        except BaseException:
            await transaction.rollback()
            raise
        if dry_run:
            await transaction.rollback()
        else:
            await transaction.commit()
    return report


async def _import(conn, first, rows: Iterator[_Row | dict], report: ImportReport, *, welcome: bool,
                  settings: Settings, progress: Callable[[str, int, int], None] | None) -> None:
    for statement in (_STAGE, _STAGE_LABELS, _STAGE_SEEN):
        await conn.execute(statement)
    tiers = _Tiers(await conn.fetch("SELECT id, name, slug FROM products"), await conn.fetchval(_DEFAULT_TIER))
    signup = [row["id"] for row in await conn.fetch(_SIGNUP_NEWSLETTERS)]
    kept = 0
    welcome = welcome and settings.welcome_emails
    chunks = _checked_chunks(_chain(first, rows), tiers)
    # The next chunk is read and checked in a thread while this one is written: the two take about
    # as long, and PostgreSQL and this process each have a core. One read at a time, in file order.
    loop = asyncio.get_running_loop()
    ahead = loop.run_in_executor(None, next, chunks, None)
    try:
        while (chunk := await ahead) is not None:
            ahead = loop.run_in_executor(None, next, chunks, None)
            kept += await _write_chunk(conn, chunk, signup, report, settings, welcome)
            if progress:
                progress("write", chunk.read, 0)
    finally:
        await asyncio.wait([ahead])  # the file is closed only once its reader has stopped
        if not ahead.cancelled():
            ahead.exception()  # raised above already, or of no matter once writing failed
    if progress:
        progress("read", report.rows, report.rows)
        progress("write", report.rows, report.rows)
    report.unchanged = kept - report.added - report.updated


def _chain(first, rows: Iterator[_Row | dict]) -> Iterator[_Row | dict]:
    if first is not None:
        yield first
    yield from rows


@dataclass
class _Chunk:
    """Up to CHUNK checked rows of the file, each the first of its address in the chunk."""

    rows: list[tuple[_Row, list[str] | None]] = field(default_factory=list)  # with their tier ids
    ids: list[str] = field(default_factory=list)  # the id each row's member gets if it is new
    refused: list[dict] = field(default_factory=list)  # {line, reason}: the rows refused meanwhile
    lines: dict[str, int] = field(default_factory=dict)  # address (lower case) → its line
    read: int = 0  # rows read so far, this chunk's included

    def add(self, row: _Row, tiers: _Tiers) -> None:
        try:
            tier_ids = tiers.ids(row)
        except BadInput as error:
            self.refused.append({"line": row.line, "reason": str(error)})
            return
        earlier = self.lines.setdefault(row.email.lower(), row.line)
        if earlier != row.line:
            self.refused.append({"line": row.line, "reason": f"the same email as line {earlier}"})
        else:
            self.rows.append((row, tier_ids))


def _checked_chunks(items: Iterator[_Row | dict], tiers: _Tiers) -> Iterator[_Chunk]:
    """The file's rows, CHUNK kept rows at a time."""
    chunk, read = _Chunk(), 0
    for item in items:
        read += 1
        if isinstance(item, dict):
            chunk.refused.append(item)
        else:
            chunk.add(item, tiers)
        if len(chunk.rows) >= CHUNK:
            chunk.read, chunk.ids = read, _new_ids(len(chunk.rows))
            yield chunk
            chunk = _Chunk()
    if chunk.rows or chunk.refused:
        chunk.read, chunk.ids = read, _new_ids(len(chunk.rows))
        yield chunk


def _new_ids(n: int) -> list[str]:
    """n new member ids as gen_random_uuid() makes them (random, version 4), at once: uuid.uuid4()
    for each costs more than checking the row."""
    raw = bytearray(os.urandom(16 * n))
    raw[6::16] = bytes(byte & 0x0F | 0x40 for byte in raw[6::16])  # the version
    raw[8::16] = bytes(byte & 0x3F | 0x80 for byte in raw[8::16])  # the variant
    h = raw.hex()
    return [f"{h[k:k + 8]}-{h[k + 8:k + 12]}-{h[k + 12:k + 16]}-{h[k + 16:k + 20]}-{h[k + 20:k + 32]}"
            for k in range(0, 32 * n, 32)]


async def _write_chunk(conn, chunk: _Chunk, signup: list[str], report: ImportReport, settings: Settings,
                       welcome: bool) -> int:
    """Write one chunk of checked rows (and queue its new members' welcome emails when asked); its
    refusals (read and found here) join the report in file order. Returns how many rows were kept."""
    rows, refused = chunk.rows, chunk.refused
    await conn.copy_records_to_table(
        "member_import", records=[(r.line, r.email, r.name, r.note, r.subscribed, r.status, r.created_at, tier_ids,
                                   new_id) for (r, tier_ids), new_id in zip(rows, chunk.ids, strict=True)],
        columns=["line", "email", "name", "note", "subscribed", "status", "created_at", "tier_ids", "member_id"])
    labels = [(r.line, name, slug) for r, _ in rows for name, slug in r.labels]
    if labels:
        await conn.copy_records_to_table("member_import_labels", records=labels, columns=["line", "name", "slug"])
    # Without statistics the planner takes the temporary tables for a few rows, and joins each
    # statement below by nested loops.
    await conn.execute("ANALYZE member_import, member_import_labels")
    dropped = {r["line"]: f"the same email as line {r['earlier']}" for r in await conn.fetch(_SEEN_BEFORE)}
    await conn.execute(_SEEN)
    await conn.execute(_MATCH)
    matched = {r["line"] for r in await conn.fetch(_MATCHED)}
    if labels:
        for statement in _FIND_LABELS:
            await conn.execute(statement)
    if labels and matched:  # a new member has no labels yet: only one that exists can get too many
        # Statistics of the rows as matched (member ids and label ids filled in): planned with the
        # earlier ones, where every id was NULL, the bound below took a nested loop (25 s a chunk).
        await conn.execute("ANALYZE member_import, member_import_labels")
        for r in await conn.fetch(_TOO_MANY_LABELS, MAX_LABELS):
            dropped[r["line"]] = f"would give the member more than {MAX_LABELS} labels"
    if dropped:
        for statement in _DROP_LINES:
            await conn.execute(statement, list(dropped))
    refused += [{"line": line, "reason": reason} for line, reason in dropped.items()]
    kept_rows = [(r, tier_ids) for r, tier_ids in rows if r.line not in dropped]
    new = [(r, new_id) for (r, _), new_id in zip(rows, chunk.ids, strict=True)
           if r.line not in dropped and r.line not in matched]

    updated = await conn.fetch(_UPDATE) if matched else []
    await _add_members(conn, new, signup)
    ids = [new_id for _, new_id in new]
    moved = {row["member_id"] for row in await conn.fetch(_SUBSCRIBE)} if matched else set()
    if matched and any(r.subscribed is False for r, _ in kept_rows):
        moved |= {row["member_id"] for row in await conn.fetch(_UNSUBSCRIBE)}
    if any(tier_ids for _, tier_ids in kept_rows):
        tiered = [row["member_id"] for row in await conn.fetch(_GIVE_TIERS)]
        report.tiers_given += len(tiered)
        moved |= set(tiered)
    if settings.address_hash_key.get_secret_value():  # the suppressions of deleted members whose address comes back
        stored = [row["email"] for row in await conn.fetch(_STORED)]
        report.suppressions_restored += await restore_suppressions(conn, stored, settings)
    if labels:
        report.labels_made += len(await conn.fetch(_MAKE_LABELS))
        await conn.execute(_FIND_LABELS[1])
        labelled = [row["member_id"] for row in await conn.fetch(_GIVE_LABELS)]
        report.labels_given += len(labelled)
        moved |= set(labelled)
    changed = {row["id"] for row in updated} | moved
    report.added += len(ids)
    report.updated += len(changed - set(ids))
    if welcome and ids:
        welcomed = [row["member_id"] for row in await conn.fetch(_ADDED_NOT_SUPPRESSED)]
        report.welcome_queued += await welcome_added_members(conn, welcomed)
    for r, tier_ids in kept_rows:
        report.created_in_future += r.future
        report.comped_default_tier += r.default_tier and tier_ids is not None
        report.comped_without_tier += r.default_tier and tier_ids is None
        if r.stripe:
            if r.status == "paid":
                report.paid_stripe += 1
            else:
                report.stripe_without_tier.append(r.line)
    report.refused += sorted(refused, key=lambda r: r["line"])
    await conn.execute("TRUNCATE member_import, member_import_labels")
    return len(kept_rows)


async def _add_members(conn, new: list[tuple[_Row, str]], signup: list[str]) -> None:
    """The chunk's new members, each with the id made for it, and their subscriptions, by COPY.
    An address matched no member a moment ago; one added since (by a signup) refuses the import
    whole, in words that do not name it."""
    try:
        await conn.copy_records_to_table(
            "members", columns=_NEW_MEMBER_COLUMNS,
            records=[(new_id, r.email, r.name, r.note, r.status or "free", r.created_at) for r, new_id in new])
    except asyncpg.UniqueViolationError:
        raise PressroomError("a member was added meanwhile with an address of this file: nothing was imported; "
                             "run the import again") from None
    await conn.copy_records_to_table(
        "members_newsletters", columns=["member_id", "newsletter_id"],
        records=[(new_id, newsletter) for r, new_id in new if r.subscribed is not False for newsletter in signup])

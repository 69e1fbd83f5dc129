"""`members import FILE.csv`: a member list in the reference platform's export format, or Mailchimp's.

The reference's columns are id, email, name, note, subscribed_to_emails, complimentary_plan,
stripe_customer_id, created_at, deleted_at, labels, tiers (and import_tier, which its importer
reads); other exports say `subscribed` and `status`. A Mailchimp audience export ("Email Address",
"First Name", "Last Name", "TAGS", "OPTIN_TIME", …) is recognised by its header and read in the
same terms. The file is outside input: every row is checked on its own (the csv module reads it;
addresses as `members add` checks them, pressroom.inputs.email_address), a refused row is set
aside with its line and why (never its address) and the rest goes in.

The file is streamed: rows are read, checked and written a chunk at a time, in one transaction
(one statement matches the chunk's addresses, whatever their case, to members; set-based statements
update those that exist; the others are COPYed into members with their subscriptions and labels),
so memory does not grow with the file; the next chunk is read and checked in a thread while one
is written. Labels go into the reference platform's labels and members_labels (found by name or
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
import contextlib
import csv
import functools
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import asyncpg

from operations.members import membership, restore_suppressions, welcome_added_members
from pressroom import database, tracing
from pressroom.errors import BadInput, PressroomError
from pressroom.inputs import MAX_LABELS, email_address, free_text, moment
from pressroom.settings import Settings, get_settings
from pressroom.store.labels import find_labels, label_pairs, make_labels
from pressroom.store.tiers import default_tier

CHUNK = 20_000  # rows per COPY and per set of statements: a progress step, and bounded memory
# The first chunks are smaller, each twice the last, up to CHUNK: PostgreSQL waits for the first
# chunk to be read and checked, and the reader keeps ahead of the writer from the second on.
FIRST_CHUNK = 2_500
NOTE_LIMIT = 2000  # the reference platform's width of a member's note
ROWS_SHOWN = 50  # refused rows the text report lists; --json lists them all
TRUE, FALSE = {"true", "1", "yes", "y", "t"}, {"false", "0", "no", "n", "f"}
REFERENCE, MAILCHIMP = "the reference platform's export", "a Mailchimp export"
# The reference's export guards cells against spreadsheet formulas with a leading ' (papaparse's
# escapeFormulae); reading its file back, the guard goes.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# Line breaks and tabs in a name (a spreadsheet's cell may hold them), with the spaces around them:
# one space each.
_NAME_BREAKS = re.compile(r"\s*[\r\n\t\v\f\x85\u2028\u2029]\s*")
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
    names_changed: int = 0  # names imported with their line breaks and tabs made spaces
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
    name_changed: bool = False  # the name had line breaks or tabs, made spaces


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
    written = _unguarded(text.get("name") or "")
    safe = _NAME_BREAKS.sub(" ", written)  # the reference keeps such a name; a header must not carry it
    name = free_text(safe, "name")
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
    tiers = (import_tier,) if import_tier else _names(text.get("tiers") or "")
    if import_tier and not (comped or stripe or status in ("paid", "comped")):
        raise BadInput("a free member cannot be imported with a tier (import_tier), as in the reference")
    given = membership(status=status, comped=comped, tiers=bool(tiers), stripe=stripe)  # the Admin API's rule
    created = (text.get("created_at") or "").strip()
    created_at = moment(created, "created_at") if created else None
    future = created_at is not None and created_at > now
    return _Row(line, email, name, note, subscribed, given.status,
                now if future or created_at is None else created_at,
                _labels(tuple(labels_cell)) if any(labels_cell) else (), tiers,
                default_tier=given.default_tier, stripe=stripe, future=future,
                name_changed=safe != written and name is not None)


@functools.lru_cache(maxsize=1024)
def _names(cell: str) -> tuple[str, ...]:
    """The names of a comma-separated cell (tiers), each once; a file repeats a few cells."""
    return tuple(dict.fromkeys(name.strip() for name in cell.split(",") if name.strip()))


@functools.lru_cache(maxsize=1024)
def _labels(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """A row's labels, each (name as written, slug) once by slug; checked once for each list of names
    (a file repeats a few)."""
    return label_pairs(names)


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
            if not "".join(cells).strip():
                continue  # a blank line, as spreadsheets leave at the end
            report.rows += 1
            if len(cells) != len(columns):
                yield {"line": line, "reason": f"has {len(cells)} cells; the header names {len(columns)} columns"}
                continue
            try:
                yield _row(line, kind.cells(dict(zip(columns, cells, strict=True))), now)
            except BadInput as error:
                yield {"line": line, "reason": str(error)}


# The chunk's rows are matched to members by address whatever its case, each by index (LATERAL …
# LIMIT 1: as a join, the planner read every member for each chunk), and sent as arrays: only the
# rows that matched are written by statements (each member's changes, set-based, by id); the others,
# the new members, are COPYed into members with their subscriptions and labels (ids made by the
# client, so they conflict with nothing, and COPY writes rows in batches). `member_import_seen`
# keeps every address of the file so far (the earlier chunks' are no longer in memory), to refuse a
# second row of one: only a row that matched can be one, since an earlier line's member exists by
# the next chunk, so the address is looked up there only for those.
# Its addresses are compared byte for byte (COLLATE "C": equality is the same in any deterministic
# collation, the index's order cheaper); at a million rows it outgrows the default 8 MB of a
# session's temporary buffers, hence TEMP_BUFFERS for the import's own connection.
_STAGE_SEEN = """CREATE TEMP TABLE member_import_seen (email text COLLATE "C" PRIMARY KEY, line int)
                 ON COMMIT DROP"""
TEMP_BUFFERS = "256MB"
_MATCH = """
SELECT c.line, m.id AS member_id, m.status = 'comped' AS comped, s.line AS earlier
FROM unnest($1::int[], $2::text[]) AS c(line, email)
CROSS JOIN LATERAL (SELECT m.id, m.status FROM members m WHERE lower(m.email) = lower(c.email) LIMIT 1) m
LEFT JOIN LATERAL (SELECT s.line FROM member_import_seen s WHERE s.email = lower(c.email) COLLATE "C" LIMIT 1) s
    ON true"""
_SEEN = """INSERT INTO member_import_seen SELECT lower(s.email), s.line
           FROM unnest($1::text[], $2::int[]) AS s(email, line)"""
# Rows (line, member, label; NULL: a label yet to be made) that would leave their (existing) member
# with more than $4 labels: the labels the row adds (new ones, and the site's that the member has
# not got), over what the member has.
_TOO_MANY_LABELS = """
WITH adding AS (
    SELECT x.line, x.member_id, count(*) AS n
    FROM unnest($1::int[], $2::text[], $3::text[]) AS x(line, member_id, label_id)
    WHERE NOT EXISTS (
        SELECT 1 FROM members_labels ml WHERE ml.member_id = x.member_id AND ml.label_id = x.label_id)
    GROUP BY x.line, x.member_id)
SELECT a.line FROM adding a
WHERE a.n + (SELECT count(*) FROM members_labels ml WHERE ml.member_id = a.member_id) > $4"""
# An existing member takes what the row says (NULL: the cell said nothing).
_UPDATE = """
UPDATE members m SET name = coalesce(u.name, m.name), note = coalesce(u.note, m.note),
       status = coalesce(u.status, m.status), updated_at = now()
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(member_id, name, note, status)
WHERE m.id = u.member_id
  AND (m.name, m.note, m.status) IS DISTINCT FROM (coalesce(u.name, m.name), coalesce(u.note, m.note),
                                                    coalesce(u.status, m.status))
RETURNING m.id"""
_NEW_MEMBER_COLUMNS = ["id", "email", "name", "note", "status", "created_at"]
# Subscriptions: a new member said `subscribed` (or not said) gets the newsletters new members get
# (subscribe on signup, active). An existing member said `subscribed` keeps the newsletters she is
# on (her choice among them is hers: an export says `true` of a member on any one); only one on
# none, who never left one (her link, a provider's unsubscribe, `members unsubscribe`), whose
# address no bounce or complaint suppressed and who is not disabled, gets the signup newsletters.
# `false` takes a member off every newsletter; not said, one that existed keeps hers.
_SIGNUP_NEWSLETTERS = "SELECT id FROM newsletters WHERE subscribe_on_signup AND status = 'active' ORDER BY id"
_SUBSCRIBE = """
INSERT INTO members_newsletters (member_id, newsletter_id)
SELECT m.id, n.id FROM members m CROSS JOIN unnest($2::text[]) AS n(id)
WHERE m.id = ANY($1::text[]) AND NOT m.email_disabled
  AND NOT EXISTS (SELECT 1 FROM members_newsletters mn WHERE mn.member_id = m.id)
  AND NOT EXISTS (SELECT 1 FROM members_subscribe_events e WHERE e.member_id = m.id AND NOT e.subscribed)
  AND NOT EXISTS (SELECT 1 FROM suppressions s WHERE s.email = m.email)
ON CONFLICT (member_id, newsletter_id) DO NOTHING
RETURNING member_id"""
_UNSUBSCRIBE = """
DELETE FROM members_newsletters mn USING unnest($1::text[]) AS u(member_id)
WHERE mn.member_id = u.member_id
RETURNING mn.member_id"""
# (member, tier) and (member, label) given to the chunk's existing members (and its new members' tiers).
_GIVE_TIERS = """
INSERT INTO members_products (member_id, product_id) SELECT * FROM unnest($1::text[], $2::text[])
ON CONFLICT (member_id, product_id) DO NOTHING
RETURNING member_id"""
_GIVE_LABELS = """
INSERT INTO members_labels (member_id, label_id) SELECT * FROM unnest($1::text[], $2::text[])
ON CONFLICT (member_id, label_id) DO NOTHING
RETURNING member_id"""
# The existing members' addresses as stored (a suppression is matched to a member's address exactly).
_STORED = "SELECT email FROM members WHERE id = ANY($1::text[])"
# The chunk's new members (id, address as stored), but those whose address a bounce or a complaint
# suppressed (a deleted member's, come back), in file order.
_NOT_SUPPRESSED = """
SELECT n.member_id FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS n(member_id, email, place)
WHERE NOT EXISTS (SELECT 1 FROM suppressions s WHERE s.email = n.email) ORDER BY n.place"""


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
        with contextlib.suppress(asyncpg.InvalidParameterValueError):
            # Settable only before the session's first temporary table: a command's connection is new
            # (a lent one that had one keeps its own).
            await conn.execute(f"SET temp_buffers = '{TEMP_BUFFERS}'")
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
    await conn.execute(_STAGE_SEEN)
    tiers = _Tiers(await conn.fetch("SELECT id, name, slug FROM products"), await default_tier(conn))
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
    """The file's rows, FIRST_CHUNK kept rows first, then twice as many each time up to CHUNK."""
    chunk, read, size = _Chunk(), 0, min(FIRST_CHUNK, CHUNK)
    for item in items:
        read += 1
        if isinstance(item, dict):
            chunk.refused.append(item)
        else:
            chunk.add(item, tiers)
        if len(chunk.rows) >= size:
            chunk.read, chunk.ids = read, _new_ids(len(chunk.rows))
            yield chunk
            chunk, size = _Chunk(), min(2 * size, CHUNK)
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
    rows = chunk.rows
    matches = await conn.fetch(_MATCH, [r.line for r, _ in rows], [r.email for r, _ in rows])
    dropped = {m["line"]: f"the same email as line {m['earlier']}" for m in matches if m["earlier"] is not None}
    member_of = {m["line"]: m["member_id"] for m in matches if m["earlier"] is None}  # line → existing member
    seen = [r for r, _ in rows if r.line not in dropped]
    await conn.execute(_SEEN, [r.email for r in seen], [r.line for r in seen])
    label_of = await _find_labels(conn, seen)
    dropped |= await _too_many_labels(conn, [(r, member_of[r.line]) for r in seen if r.line in member_of], label_of)

    # The default tier is for a member the row makes complimentary: one who is already keeps her tiers
    # (an export writes a comped member without a tier so, and reading it back changes nothing).
    comped = {m["line"] for m in matches if m["comped"]}
    kept = [(r, None if r.default_tier and r.line in comped else tier_ids) for r, tier_ids in rows
            if r.line not in dropped]
    existing = [(r, member_of[r.line]) for r, _ in kept if r.line in member_of]
    new = [(r, new_id) for (r, _), new_id in zip(rows, chunk.ids, strict=True)
           if r.line not in dropped and r.line not in member_of]
    ids = [new_id for _, new_id in new]
    report.labels_made += await _make_labels(conn, [r for r, _ in kept], label_of)
    changed = await _change_members(conn, existing, signup)
    await _add_members(conn, new, signup)
    report.labels_given += await _label_new_members(conn, new, label_of)
    labelled = [(member, label_of[pair]) for r, member in existing for pair in r.labels]
    given = await conn.fetch(_GIVE_LABELS, *_columns(labelled)) if labelled else []
    report.labels_given += len(given)
    changed |= {row["member_id"] for row in given}
    member_of |= dict(zip((r.line for r, _ in new), ids, strict=True))
    tiers = [(member_of[r.line], tier) for r, tier_ids in kept for tier in tier_ids or ()]
    if tiers:
        tiered = [row["member_id"] for row in await conn.fetch(_GIVE_TIERS, *_columns(tiers))]
        report.tiers_given += len(tiered)
        changed |= set(tiered)
    if settings.address_hash_key.get_secret_value():  # the suppressions of deleted members whose address comes back
        stored = [r.email for r, _ in new]
        if existing:
            stored += [row["email"] for row in await conn.fetch(_STORED, [member for _, member in existing])]
        report.suppressions_restored += await restore_suppressions(conn, stored, settings)
    report.added += len(ids)
    report.updated += len(changed - set(ids))
    if welcome and ids:
        welcomed = [row["member_id"] for row in await conn.fetch(_NOT_SUPPRESSED, ids, [r.email for r, _ in new])]
        report.welcome_queued += await welcome_added_members(conn, welcomed)
    for r, tier_ids in kept:
        report.created_in_future += r.future
        report.names_changed += r.name_changed
        report.comped_default_tier += r.default_tier and tier_ids is not None
        report.comped_without_tier += r.default_tier and tier_ids is None and r.line not in comped
        if r.stripe:
            if r.status == "paid":
                report.paid_stripe += 1
            else:
                report.stripe_without_tier.append(r.line)
    refused = chunk.refused + [{"line": line, "reason": reason} for line, reason in dropped.items()]
    report.refused += sorted(refused, key=lambda r: r["line"])
    return len(kept)


def _columns(rows: list[tuple]) -> list[list]:
    """Tuples (at least one) as the arrays of their columns, for unnest: [(a, 1), (b, 2)] → [[a, b], [1, 2]]."""
    return [list(column) for column in zip(*rows, strict=True)]


async def _find_labels(conn, rows: list[_Row]) -> dict[tuple[str, str], str | None]:
    """The site's label for each (name, slug) the rows name; None for one it does not have yet."""
    return await find_labels(conn, list(dict.fromkeys(pair for r in rows for pair in r.labels)))


async def _too_many_labels(conn, existing: list[tuple[_Row, str]],
                           label_of: dict[tuple[str, str], str | None]) -> dict[int, str]:
    """Rows that would give their member (one that exists: a new member has no labels yet) more than
    MAX_LABELS labels, by line, with the reason."""
    adding = [(r.line, member, label_of[pair]) for r, member in existing for pair in r.labels]
    if not adding:
        return {}
    return {x["line"]: f"would give the member more than {MAX_LABELS} labels"
            for x in await conn.fetch(_TOO_MANY_LABELS, *_columns(adding), MAX_LABELS)}


async def _make_labels(conn, kept: list[_Row], label_of: dict[tuple[str, str], str | None]) -> int:
    """The labels the kept rows name and the site does not have, made (named as their first row
    spells them) and put in `label_of`. Returns how many were made."""
    missing: dict[str, str] = {}  # slug → name
    for r in kept:
        for name, slug in r.labels:
            if label_of[(name, slug)] is None:
                missing.setdefault(slug, name)
    made, by_slug = await make_labels(conn, missing)
    for (name, slug), label in label_of.items():
        if label is None:
            label_of[(name, slug)] = by_slug.get(slug)  # None only for a dropped row's label
    return made


async def _change_members(conn, existing: list[tuple[_Row, str]], signup: list[str]) -> set[str]:
    """What the rows say of the members that exist (each row with its member): name, note, status
    and subscriptions. Returns the members changed."""
    said = [(member, r.name, r.note, r.status) for r, member in existing
            if r.name is not None or r.note is not None or r.status is not None]
    changed = {row["id"] for row in await conn.fetch(_UPDATE, *_columns(said))} if said else set()
    subscribing = [member for r, member in existing if r.subscribed]
    if subscribing and signup:
        changed |= {row["member_id"] for row in await conn.fetch(_SUBSCRIBE, subscribing, signup)}
    leaving = [member for r, member in existing if r.subscribed is False]
    if leaving:
        changed |= {row["member_id"] for row in await conn.fetch(_UNSUBSCRIBE, leaving)}
    return changed


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


async def _label_new_members(conn, new: list[tuple[_Row, str]], label_of: dict[tuple[str, str], str | None]) -> int:
    """The new members' labels, by COPY (a new member has none to conflict with; two names of a row
    can be one label). Returns how many were given."""
    records = [(new_id, label) for r, new_id in new
               for label in dict.fromkeys(label_of[pair] for pair in r.labels)]
    if records:
        await conn.copy_records_to_table("members_labels", columns=["member_id", "label_id"], records=records)
    return len(records)

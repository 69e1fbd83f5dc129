"""The site's labels, as the reference keeps them: a name and a slug each. A label given by name
(a member added or changed through the CLI or the Admin API, a row of an import) is the site's
label of that name (any case) or of its slug; otherwise it is made with that name and the
reference's slug of it. Every way in reads and makes labels here."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

import asyncpg
from text_unidecode import unidecode

from pressroom.errors import BadInput
from pressroom.inputs import MAX_LABELS, free_text

SLUG_LENGTH = 191  # the reference's width of labels.slug


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


def label_pairs(names: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """Labels given by name (or slug), checked: each (name as written, slug) once by slug."""
    labels: dict[str, str] = {}
    for label in names:
        if label.strip():
            label = free_text(label, "label") or ""
            slug = slugify(label)[:SLUG_LENGTH]
            if not slug:
                raise BadInput("a label has no letter or digit to make its slug of")
            labels.setdefault(slug, label)
    if len(labels) > MAX_LABELS:
        raise BadInput(f"names {len(labels):,} labels; a member has at most {MAX_LABELS}")
    return tuple((label, slug) for slug, label in labels.items())


# A label is the site's label of that name (any case), or of that slug; otherwise (NULL) it is new.
_FIND = """
SELECT p.name, p.slug, coalesce((SELECT l.id FROM labels l WHERE lower(l.name) = lower(p.name) LIMIT 1),
                                (SELECT l.id FROM labels l WHERE l.slug = p.slug)) AS id
FROM unnest($1::text[], $2::text[]) AS p(name, slug)"""
# A label the site does not have is made with the name given for it; then read by slug in a
# statement of its own, which sees one made meanwhile by another transaction too.
_MAKE = """
INSERT INTO labels (name, slug) SELECT * FROM unnest($1::text[], $2::text[])
ON CONFLICT (slug) DO NOTHING
RETURNING id"""
_BY_SLUG = "SELECT slug, id FROM labels WHERE slug = ANY($1::text[])"
_GIVE = """
INSERT INTO members_labels (member_id, label_id) SELECT $1, unnest($2::text[])
ON CONFLICT (member_id, label_id) DO NOTHING
RETURNING label_id"""


async def find_labels(conn: asyncpg.Connection, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
    """The site's label for each (name, slug); None for one it does not have yet."""
    if not pairs:
        return {}
    names, slugs = [name for name, _ in pairs], [slug for _, slug in pairs]
    return {(x["name"], x["slug"]): x["id"] for x in await conn.fetch(_FIND, names, slugs)}


async def make_labels(conn: asyncpg.Connection, missing: dict[str, str]) -> tuple[int, dict[str, str]]:
    """Labels made from {slug: name}: (how many were made, {slug: id} of all of them)."""
    if not missing:
        return 0, {}
    made = await conn.fetch(_MAKE, list(missing.values()), list(missing))
    return len(made), {x["slug"]: x["id"] for x in await conn.fetch(_BY_SLUG, list(missing))}


async def ensure_labels(conn: asyncpg.Connection, pairs: tuple[tuple[str, str], ...]) -> list[str]:
    """The ids of these labels, those the site does not have made: in the caller's transaction."""
    found = await find_labels(conn, list(pairs))
    _, made = await make_labels(conn, {slug: name for (name, slug), label in found.items() if label is None})
    return list(dict.fromkeys(found[pair] or made[pair[1]] for pair in pairs))


async def give_labels(conn: asyncpg.Connection, member_id: str, pairs: tuple[tuple[str, str], ...]) -> list[str]:
    """The member labelled (labels made as needed); the label ids newly given."""
    if not pairs:
        return []
    ids = await ensure_labels(conn, pairs)
    return [r["label_id"] for r in await conn.fetch(_GIVE, member_id, ids)]


async def slugs_of(conn: asyncpg.Connection, pairs: tuple[tuple[str, str], ...]) -> list[str]:
    """The slug each label given by name has on the site (the slug it would be made with, for a new one)."""
    found = await find_labels(conn, list(pairs))
    by_id = {r["id"]: r["slug"] for r in await conn.fetch(
        "SELECT id, slug FROM labels WHERE id = ANY($1::text[])", [i for i in found.values() if i])}
    return [by_id[found[pair]] if found[pair] else pair[1] for pair in pairs]


async def add_label(conn: asyncpg.Connection, name: str, slug: str | None) -> asyncpg.Record:
    """A label made by name (POST labels/): refused when the site has one of that name (any case);
    its slug the reference's of the name, made unique as the reference makes it (`-2`, `-3`, …), or
    the slug given, refused when taken."""
    existing = await conn.fetchval("SELECT name FROM labels WHERE lower(name) = lower($1) LIMIT 1", name)
    if existing is not None:
        raise BadInput(f"the site has the label {existing!r} (names are compared in any case)")
    base = slug or slugify(name)[:SLUG_LENGTH]
    if not base:
        raise BadInput("a label has no letter or digit to make its slug of")
    for n in range(1, 100):
        candidate = base if n == 1 else f"{base[:SLUG_LENGTH - 4]}-{n}"
        row = await conn.fetchrow("INSERT INTO labels (name, slug) VALUES ($1, $2) ON CONFLICT (slug) DO NOTHING "
                                  "RETURNING *", name, candidate)
        if row is not None:
            return row
        if slug:
            break
    raise BadInput(f"the slug {base!r} is taken")


async def take_labels(conn: asyncpg.Connection, member_id: str, pairs: tuple[tuple[str, str], ...]) -> list[str]:
    """The member's labels of these names (any case) or slugs taken off; the label ids taken."""
    return [r["label_id"] for r in await conn.fetch(
        "DELETE FROM members_labels ml USING labels l WHERE ml.member_id = $1 AND l.id = ml.label_id "
        "AND (l.slug = ANY($2::text[]) OR lower(l.name) = ANY($3::text[])) RETURNING ml.label_id",
        member_id, [slug for _, slug in pairs], [name.lower() for name, _ in pairs])]

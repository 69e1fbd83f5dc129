"""A post's tags and authors (schema/0090): written in the caller's transaction, set-based, each
list replacing the post's in the order given, and read back as JSON for the post's answers.

Tags are found by slug or created by name, as the reference's API does; an author is found by id,
slug or address, else made from the name given. Names and slugs are checked where they entered
(operations/authoring.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg

from pressroom.errors import NotFound
from pressroom.recipient_filter import And, Everyone, FilterError, Node, Or

# Each post's tags and authors in order, as JSON text (the reference's fields for each).
TAGS_JSON = """coalesce((SELECT json_agg(json_build_object('id', t.id, 'name', t.name, 'slug', t.slug,
        'description', t.description, 'visibility', t.visibility, 'created_at', t.created_at,
        'updated_at', t.updated_at) ORDER BY pt.sort_order)
    FROM posts_tags pt JOIN tags t ON t.id = pt.tag_id WHERE pt.post_id = p.id), '[]')::text"""
AUTHORS_JSON = """coalesce((SELECT json_agg(json_build_object('id', a.id, 'name', a.name, 'slug', a.slug,
        'email', a.email, 'created_at', a.created_at, 'updated_at', a.updated_at) ORDER BY pa.sort_order)
    FROM posts_authors pa JOIN authors a ON a.id = pa.author_id WHERE pa.post_id = p.id), '[]')::text"""
# The byline's names alone, for the email (activities/email_content.py).
AUTHOR_NAMES_JSON = """(SELECT json_agg(a.name ORDER BY pa.sort_order)
    FROM posts_authors pa JOIN authors a ON a.id = pa.author_id WHERE pa.post_id = p.id)::text"""

# Missing tags made (a name starting with # is an internal tag, as on the reference), then every one's id.
_ENSURE_TAGS = """
WITH given AS (SELECT * FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS g(slug, name, n)),
made AS (INSERT INTO tags (name, slug, visibility)
         SELECT name, slug, CASE WHEN name LIKE '#%' THEN 'internal' ELSE 'public' END FROM given
         WHERE name IS NOT NULL ON CONFLICT (slug) DO NOTHING RETURNING id, slug)
SELECT g.n, g.slug, coalesce(m.id, t.id) AS id FROM given g
LEFT JOIN made m ON m.slug = g.slug LEFT JOIN tags t ON t.slug = g.slug ORDER BY g.n"""

_REPLACE = """
INSERT INTO {table} (post_id, {column}, sort_order)
SELECT $1, t.id, t.n FROM unnest($2::text[]) WITH ORDINALITY AS t(id, n)"""


async def _replace(conn: asyncpg.Connection, table: str, column: str, post_id: str, ids: list[str]) -> None:
    await conn.execute(f"DELETE FROM {table} WHERE post_id = $1", post_id)
    await conn.execute(_REPLACE.format(table=table, column=column), post_id, list(dict.fromkeys(ids)))

# Each author given by id, slug or address, or made from its name with a free slug.
_FIND_AUTHORS = """
SELECT g.n, a.id FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS g(id, slug, email, n)
LEFT JOIN LATERAL (SELECT id FROM authors a WHERE a.id = g.id OR a.slug = g.slug OR lower(a.email) = lower(g.email)
                   ORDER BY a.id = g.id DESC, a.slug = g.slug DESC LIMIT 1) a ON true ORDER BY g.n"""


async def write_tags(conn: asyncpg.Connection, post_id: str, tags: list[tuple[str, str | None]]) -> None:
    """The post's tags, each (slug, name or None to find it only); a slug not found without a name is refused."""
    rows = await conn.fetch(_ENSURE_TAGS, [slug for slug, _ in tags], [name for _, name in tags])
    absent = [row["slug"] for row in rows if row["id"] is None]
    if absent:
        raise NotFound(f"no tag {', '.join(absent)}")
    await _replace(conn, "posts_tags", "tag_id", post_id, [row["id"] for row in rows])


async def write_authors(conn: asyncpg.Connection, post_id: str, authors: list[dict[str, str | None]]) -> None:
    """The post's authors, each {id, slug, email, name, new_slug}: found by the first three, else made
    from the name (its slug the one given, else `new_slug`, made free)."""
    found = await conn.fetch(_FIND_AUTHORS, [a.get("id") for a in authors], [a.get("slug") for a in authors],
                             [a.get("email") for a in authors])
    ids = []
    for author, row in zip(authors, found, strict=True):
        author_id = row["id"]
        if author_id is None:
            if not author.get("name"):
                raise NotFound(f"no author {author.get('id') or author.get('slug') or 'with that address'}")
            author_id = await conn.fetchval(
                "INSERT INTO authors (name, slug, email) VALUES ($1, $2, $3) RETURNING id", author["name"],
                await _free_author_slug(conn, str(author.get("slug") or author["new_slug"])), author.get("email"))
        ids.append(author_id)
    await _replace(conn, "posts_authors", "author_id", post_id, ids)


async def _free_author_slug(conn: asyncpg.Connection, wanted: str) -> str:
    taken = {r["slug"] for r in await conn.fetch("SELECT slug FROM authors WHERE slug = $1 OR slug LIKE $1 || '-%'",
                                                 wanted)}
    return wanted if wanted not in taken else next(
        f"{wanted}-{n}" for n in range(2, len(taken) + 3) if f"{wanted}-{n}" not in taken)


# --- the posts filter ----------------------------------------------------------------------------

# Each plain key of the posts filter (pressroom/recipient_filter.py's POST_KEYS) and its column.
_COLUMNS = {"status": "CASE WHEN p.status = 'sent' THEN 'published' ELSE p.status END", "slug": "p.slug",
            "id": "p.id", "uuid": "p.uuid::text", "visibility": "p.visibility", "newsletter": "n.slug",
            "published_at": "p.published_at", "created_at": "p.created_at", "updated_at": "p.updated_at"}
_TAGGED = "p.id IN (SELECT pt.post_id FROM posts_tags pt JOIN tags t ON t.id = pt.tag_id WHERE t.slug = ANY({}))"
_BY = "p.id IN (SELECT pa.post_id FROM posts_authors pa JOIN authors a ON a.id = pa.author_id WHERE a.slug = ANY({}))"


def filter_sql(tree: Node, first_param: int) -> tuple[str, list[Any]]:
    """(the posts filter's tree as a predicate over `p` and `n`, its newsletter; the values it binds
    from ${first_param} on): every value bound, none part of the SQL. A time that is not one raises FilterError."""
    args: list[Any] = []

    def sql(node: Node) -> str:
        if isinstance(node, Everyone):
            return "TRUE"
        if isinstance(node, (And, Or)):
            joined = " AND " if isinstance(node, And) else " OR "
            return "(" + joined.join(sql(part) for part in node.parts) + ")"
        if node.compare:
            args.append(_moment(node.key, node.values[0]))
            return f"{_COLUMNS[node.key]} {node.compare} ${first_param + len(args) - 1}::timestamptz"
        args.append(list(node.values))
        param = f"${first_param + len(args) - 1}::text[]"
        test = (_TAGGED.format(param) if node.key == "tag" else _BY.format(param) if node.key == "author"
                else f"{_COLUMNS[node.key]}::text = ANY({param})")
        return f"NOT {test}" if node.negated else test

    return sql(tree), args


def _moment(key: str, text: str) -> datetime:
    """A filter's time as the reference's NQL writes it ('2026-01-01', '2026-01-01 10:00:00', ISO 8601),
    UTC unless it says otherwise."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(f"posts filter: {key} {text[:40]!r} is not a date or a time (2026-01-01, "
                          "2026-01-01 10:00:00 or ISO 8601)") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)

"""Authoring: newsletters, posts (from HTML or Markdown) and their emails, and a failed email sent again.

One path per action: `pressroom newsletters …`, `pressroom posts add|edit|delete`, `pressroom
newsletter retry` and the Admin API (frontdoor/admin_api/) call these functions and nothing else
writes these rows. A post with a newsletter has one email (pending until its post is published);
publication goes through operations/posts.py's durable timer, which hands the email to the send.

Post HTML is hostile: it is sanitised once here, where it enters (nh3, an allow-list of tags and
attributes; scripts, event handlers and `javascript:` links go), and Markdown is rendered with its
raw HTML escaped (markdown-it-py) before the same sanitiser.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import unicodedata
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlsplit

import asyncpg
import nh3
from markdown_it import MarkdownIt
from pydantic import BaseModel, field_validator
from temporalio.client import Client, WorkflowFailureError
from temporalio.service import RPCError

from activities.outbox import site_events
from activities.posts.models import publish_workflow_id
from operations.newsletter import start_newsletter
from operations.posts import change_post, tell_post_workflow
from pressroom import database, lexical, mobiledoc, tracing
from pressroom.email_rendering import html_to_text
from pressroom.email_template import DESIGN_COLUMNS
from pressroom.errors import BadInput, NotFound, PressroomError
from pressroom.inputs import email_address, entity_id, free_text
from pressroom.inputs import slug as slug_input
from pressroom.recipient_filter import FilterError, parse
from pressroom.settings import Settings, get_settings
from pressroom.store import labels
from pressroom.store import posts as post_store
from pressroom.temporal import resolve_client

POST_STATUSES = ("draft", "scheduled", "published")
VISIBILITIES = ("public", "members", "paid", "tiers")
MAX_POST_BYTES = 2 * 1024 * 1024  # a long essay is a few hundred kilobytes of HTML


class UpdateCollision(PressroomError):
    """The row changed since the caller read it (its updated_at differs): nothing was written."""


class Newsletter(BaseModel):
    id: str
    uuid: str
    name: str
    slug: str
    sender_name: str | None
    sender_email: str | None
    sender_reply_to: str
    status: str
    subscribe_on_signup: bool
    created_at: datetime
    updated_at: datetime
    # The design, in the reference's columns (schema/0083_newsletter_design.sql has its defaults).
    header_image: str | None = None
    show_header_icon: bool = True
    show_header_title: bool = True
    show_header_name: bool = True
    title_font_category: str = "sans_serif"
    title_alignment: str = "center"
    show_post_title_section: bool = True
    show_feature_image: bool = True
    body_font_category: str = "sans_serif"
    show_byline: bool = True
    show_excerpt: bool = False
    footer_content: str | None = None
    show_badge: bool = True
    background_color: str = "light"
    border_color: str | None = None
    title_color: str | None = None
    link_color: str | None = None
    button_color: str | None = None


class Post(BaseModel):
    id: str
    uuid: str
    title: str
    slug: str
    html: str
    plaintext: str
    lexical: str | None = None  # as sent
    mobiledoc: str | None = None  # as sent
    custom_excerpt: str | None
    feature_image: str | None = None
    feature_image_alt: str | None = None
    feature_image_caption: str | None = None  # the editor's HTML, sanitised
    meta_title: str | None = None
    meta_description: str | None = None
    status: str
    visibility: str
    tiers: list[str]
    published_at: datetime | None
    newsletter: str | None  # its slug
    email_segment: str
    email_id: str | None
    email_status: str | None
    created_at: datetime
    updated_at: datetime
    tags: list[dict[str, Any]] = []  # in order, each as pressroom/store/posts.py reads it
    authors: list[dict[str, Any]] = []

    @field_validator("tags", "authors", mode="before")
    @classmethod
    def _from_json(cls, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value


class TagRef(BaseModel):
    """A tag as a client names it: by slug, or by name (made when no tag has its slug)."""

    name: str | None = None
    slug: str | None = None


class AuthorRef(BaseModel):
    """An author as a client names them: by id, slug or address, or by name (made when not found)."""

    id: str | None = None
    name: str | None = None
    slug: str | None = None
    email: str | None = None


class PostChange(BaseModel):
    """What to write to a post; a field left None is left as it is (or takes its default on add)."""

    title: str | None = None
    slug: str | None = None
    html: str | None = None
    markdown: str | None = None
    lexical: str | None = None  # the reference editor's document, as sent (JSON text)
    mobiledoc: str | None = None  # its older editor's document, as sent (JSON text)
    custom_excerpt: str | None = None
    feature_image: str | None = None  # "" takes it off, as do the four below
    feature_image_alt: str | None = None
    feature_image_caption: str | None = None
    meta_title: str | None = None
    meta_description: str | None = None
    status: Literal["draft", "scheduled", "published"] | None = None
    at: datetime | None = None  # publication time: scheduled's, or a published post's in the past
    newsletter: str | None = None  # id or slug; "" takes it off
    segment: str | None = None  # the email's recipient filter
    visibility: str | None = None
    tiers: list[str] | None = None
    tags: list[TagRef] | None = None  # in order; [] takes them all off
    authors: list[AuthorRef] | None = None
    updated_at: datetime | None = None  # the version the caller edits (the reference's collision check)


class EmailRetry(BaseModel):
    email_id: str
    workflow_id: str
    started: bool
    message: str


# --- content -------------------------------------------------------------------------------------

_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "caption", "cite", "code", "col", "colgroup", "dd", "del", "details",
    "div", "dl", "dt", "em", "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins",
    "kbd", "li", "mark", "ol", "p", "pre", "q", "s", "samp", "section", "small", "span", "strong", "sub", "summary",
    "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul", "article", "aside", "header", "footer",
}
_ATTRIBUTES = {
    "*": {"class", "id", "title", "lang", "dir", "data-gh-segment"},
    "a": {"href", "name", "target"},
    "img": {"src", "alt", "width", "height"},
    "td": {"colspan", "rowspan", "align"},
    "th": {"colspan", "rowspan", "align"},
    "col": {"span"},
    "ol": {"start"},
}
_MARKER = re.compile(r"<!--\s*members-only\s*-->", re.IGNORECASE)


def post_html(html: str | None = None, markdown: str | None = None) -> str:
    """The post's HTML from the author's HTML or Markdown, sanitised; the members-only marker kept."""
    if (html is None) == (markdown is None):
        raise BadInput("give the post's content as HTML or as Markdown, one of the two")
    source = html if html is not None else markdown
    assert source is not None
    if len(source.encode()) > MAX_POST_BYTES:
        raise BadInput(f"the post is {len(source.encode()):,} bytes; at most {MAX_POST_BYTES:,}")
    # The marker is a comment, and comments go (Markdown escapes them): it passes as a word of its own.
    word = f"pressroom-marker-{secrets.token_hex(8)}"
    kept = _MARKER.sub(word, source)
    if markdown is not None:
        kept = MarkdownIt("commonmark", {"html": False}).enable("table").enable("strikethrough").render(kept)
    clean = nh3.clean(kept, tags=_TAGS, attributes=_ATTRIBUTES, url_schemes={"http", "https", "mailto"},
                      link_rel="noopener noreferrer")
    return clean.replace(word, "<!--members-only-->")


def post_lexical(document: str, post_url: str = "") -> dict[str, str]:
    """A Lexical post's columns: the document as sent, its web HTML and its email HTML, both
    sanitised as any post HTML is; a card Pressroom cannot render is refused by name."""
    if len(document.encode()) > MAX_POST_BYTES:
        raise BadInput(f"the post is {len(document.encode()):,} bytes; at most {MAX_POST_BYTES:,}")
    return {"lexical": document, "html": post_html(lexical.render(document, "web", post_url)),
            "email_html": post_html(lexical.render(document, "email", post_url))}


def post_mobiledoc(document: str, post_url: str = "") -> dict[str, str]:
    """A mobiledoc post's columns, as post_lexical's: its cards through the same card renderers."""
    if len(document.encode()) > MAX_POST_BYTES:
        raise BadInput(f"the post is {len(document.encode()):,} bytes; at most {MAX_POST_BYTES:,}")
    return {"mobiledoc": document, "html": post_html(mobiledoc.render(document, "web", post_url)),
            "email_html": post_html(mobiledoc.render(document, "email", post_url))}


def post_text(html: str) -> str:
    return html_to_text(html)


def slug_of(text: str) -> str:
    """A slug from a title, as the reference platform makes one: lowercase words joined by hyphens."""
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", plain.lower()).strip("-")[:180] or "untitled"


def _title(value: str | None) -> str:
    title = free_text(value, "title", 255)
    if title is None:
        raise BadInput("a post needs a title")
    return title


def _segment(value: str | None) -> str:
    text = (value or "all").strip()
    try:
        parse(text)
    except FilterError as error:
        raise BadInput(f"the segment is not a recipient filter: {error}") from None
    return text


def _visibility(value: str) -> str:
    if value not in VISIBILITIES:
        raise BadInput(f"visibility {value!r} is not one of {', '.join(VISIBILITIES)}")
    return value


# --- newsletters ---------------------------------------------------------------------------------

DESIGN_SWITCHES = ("show_header_icon", "show_header_title", "show_header_name", "show_post_title_section",
                   "show_feature_image", "show_byline", "show_excerpt", "show_badge")
# Each choice column and what it takes, as the reference validates them; None: the column may be null.
FONT_CATEGORIES = ("serif", "sans_serif")
DESIGN_CHOICES: dict[str, tuple[str | None, ...]] = {
    "title_font_category": FONT_CATEGORIES, "body_font_category": FONT_CATEGORIES,
    "title_alignment": ("center", "left"),
    "background_color": ("light", "dark"), "border_color": (None, "auto", "accent"),
    "title_color": (None, "auto", "accent"), "link_color": (None, "accent"), "button_color": (None, "accent", "auto"),
}
_COLOURS = frozenset({"background_color", "border_color", "title_color", "link_color", "button_color"})
_HEX = re.compile(r"#[0-9a-fA-F]{6}")
DESIGN_FIELDS = DESIGN_COLUMNS
MAX_FOOTER_BYTES = 20_000

_NEWSLETTER = ("SELECT id, uuid::text AS uuid, name, slug, sender_name, sender_email, sender_reply_to, status, "
               f"subscribe_on_signup, created_at, updated_at, {', '.join(DESIGN_FIELDS)} FROM newsletters")


def design_fields(design: dict[str, Any]) -> dict[str, Any]:
    """A newsletter's design as given (only the fields given), each checked; BadInput names the first wrong one."""
    fields: dict[str, Any] = {}
    for name, value in design.items():
        if name in DESIGN_SWITCHES:
            if not isinstance(value, bool):
                raise BadInput(f"newsletter {name} must be true or false")
            fields[name] = value
        elif name in DESIGN_CHOICES:
            allowed = DESIGN_CHOICES[name]
            if value in allowed:
                fields[name] = value
            elif name in _COLOURS and isinstance(value, str) and _HEX.fullmatch(value):
                fields[name] = value.lower()
            else:
                words = ", ".join("null" if a is None else a for a in allowed)
                raise BadInput(f"newsletter {name} {str(value)[:40]!r} is not one of {words}"
                               + (" or a colour as #rrggbb" if name in _COLOURS else ""))
        elif name == "header_image":
            fields[name] = _image_url(value) if value else None
        elif name == "footer_content":
            if value is not None and not isinstance(value, str):
                raise BadInput("newsletter footer_content must be HTML text")
            if value and len(value.encode()) > MAX_FOOTER_BYTES:
                raise BadInput(f"newsletter footer_content is {len(value.encode()):,} bytes; "
                               f"at most {MAX_FOOTER_BYTES:,}")
            # The same sanitiser as a post's HTML: the footer goes into every email as it is.
            fields[name] = post_html(html=value).replace("<!--members-only-->", "") if value and value.strip() \
                else None
        else:
            raise BadInput(f"newsletter design has no field {name!r}")
    return fields


def _image_url(value: Any) -> str:
    if not isinstance(value, str) or len(value) > 2000:
        raise BadInput("newsletter header_image must be an http(s) URL")
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname \
            or any(c.isspace() or not c.isprintable() for c in value.strip()):
        raise BadInput(f"newsletter header_image {value[:60]!r} is not an http(s) URL")
    return value.strip()


def _newsletter_fields(name: str | None, sender_name: str | None, sender_email: str | None,
                       sender_reply_to: str | None, status: str | None) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if name is not None:
        fields["name"] = free_text(name, "name")
        if fields["name"] is None:
            raise BadInput("a newsletter needs a name")
    if sender_name is not None:
        fields["sender_name"] = free_text(sender_name, "sender name")
    if sender_email is not None:
        fields["sender_email"] = email_address(sender_email, "sender email") if sender_email.strip() else None
    if sender_reply_to is not None:
        fields["sender_reply_to"] = sender_reply_to if sender_reply_to in ("newsletter", "support") \
            else email_address(sender_reply_to, "reply-to")
    if status is not None:
        if status not in ("active", "archived"):
            raise BadInput(f"newsletter status {status!r} is not one of active, archived")
        fields["status"] = status
    return fields


async def add_newsletter(name: str, *, slug: str | None = None, sender_name: str | None = None,
                         sender_email: str | None = None, sender_reply_to: str | None = None,
                         subscribe_on_signup: bool = True, design: dict[str, Any] | None = None,
                         settings: Settings | None = None, pool: asyncpg.Pool | None = None) -> Newsletter:
    """A newsletter; its slug from its name unless given (a taken slug is refused)."""
    fields = _newsletter_fields(name, sender_name, sender_email, sender_reply_to, None)
    fields.update(design_fields(design or {}))
    fields["slug"] = slug_input(slug, "newsletter slug") if slug else slug_of(fields["name"])
    fields["subscribe_on_signup"] = subscribe_on_signup
    settings = settings or get_settings()
    columns = list(fields)
    async with database.connection(settings.require_database(), pool) as conn:
        try:
            row = await conn.fetchrow(
                f"WITH added AS (INSERT INTO newsletters ({', '.join(columns)}) "
                f"VALUES ({', '.join(f'${i + 1}' for i in range(len(columns)))}) RETURNING *) "
                f"{_NEWSLETTER.replace('newsletters', 'added')}", *fields.values())
        except asyncpg.UniqueViolationError:
            raise BadInput(f"a newsletter with the slug {fields['slug']!r} already exists") from None
    return Newsletter(**dict(row))


async def edit_newsletter(newsletter: str, *, name: str | None = None, sender_name: str | None = None,
                          sender_email: str | None = None, sender_reply_to: str | None = None,
                          status: str | None = None, subscribe_on_signup: bool | None = None,
                          design: dict[str, Any] | None = None, settings: Settings | None = None,
                          pool: asyncpg.Pool | None = None) -> Newsletter:
    """Change a newsletter (by id or slug); only the fields given (of its design too)."""
    entity_id(newsletter, "newsletter")
    fields = _newsletter_fields(name, sender_name, sender_email, sender_reply_to, status)
    fields.update(design_fields(design or {}))
    if subscribe_on_signup is not None:
        fields["subscribe_on_signup"] = subscribe_on_signup
    settings = settings or get_settings()
    sets = ", ".join(f"{column} = ${i + 2}" for i, column in enumerate(fields))
    async with database.connection(settings.require_database(), pool) as conn:
        row = await conn.fetchrow(
            f"WITH changed AS (UPDATE newsletters SET {sets}{', ' if sets else ''}updated_at = now() "
            f"WHERE id = (SELECT id FROM newsletters WHERE id = $1 OR slug = $1 ORDER BY id = $1 DESC LIMIT 1) "
            f"RETURNING *) {_NEWSLETTER.replace('newsletters', 'changed')}", newsletter, *fields.values())
    if row is None:
        raise NotFound(f"newsletter {newsletter} does not exist")
    return Newsletter(**dict(row))


async def opt_in_existing(newsletter_id: str, *, settings: Settings | None = None,
                          pool: asyncpg.Pool | None = None) -> int:
    """Subscribe to the newsletter every member subscribed to another one (the reference's
    `opt_in_existing`); how many joined."""
    settings = settings or get_settings()
    async with database.connection(settings.require_database(), pool) as conn:
        done = await conn.execute(
            "INSERT INTO members_newsletters (member_id, newsletter_id) SELECT DISTINCT member_id, $1 "
            "FROM members_newsletters WHERE newsletter_id <> $1 ON CONFLICT DO NOTHING", newsletter_id)
    return int(done.rsplit(" ", 1)[-1])


async def list_newsletters(*, settings: Settings | None = None, pool: asyncpg.Pool | None = None) -> list[Newsletter]:
    settings = settings or get_settings()
    async with database.connection(settings.require_database(), pool) as conn:
        rows = await conn.fetch(f"{_NEWSLETTER} ORDER BY created_at, id")
    return [Newsletter(**dict(r)) for r in rows]


# --- posts ---------------------------------------------------------------------------------------

POST_QUERY = """
SELECT p.id, p.uuid::text AS uuid, p.title, p.slug, p.html, p.plaintext, p.lexical, p.mobiledoc, p.custom_excerpt,
       p.feature_image, p.feature_image_alt, p.feature_image_caption, p.meta_title, p.meta_description,
       CASE WHEN p.status = 'sent' THEN 'published' ELSE p.status END AS status, p.visibility,
       coalesce((SELECT array_agg(pr.slug ORDER BY pp.sort_order, pr.slug) FROM posts_products pp
                 JOIN products pr ON pr.id = pp.product_id WHERE pp.post_id = p.id), '{}') AS tiers,
       p.published_at, n.slug AS newsletter, p.email_recipient_filter AS email_segment,
       e.id AS email_id, e.status AS email_status, p.created_at, p.updated_at,
       """ + post_store.TAGS_JSON + " AS tags, " + post_store.AUTHORS_JSON + """ AS authors
FROM posts p LEFT JOIN newsletters n ON n.id = p.newsletter_id LEFT JOIN emails e ON e.post_id = p.id"""


async def read_post(conn, post: str) -> Post:
    """A post by id or slug."""
    row = await conn.fetchrow(f"{POST_QUERY} WHERE p.id = $1 OR p.slug = $1 ORDER BY p.id = $1 DESC LIMIT 1", post)
    if row is None:
        raise NotFound(f"post {post} does not exist")
    return Post(**dict(row))


async def _free_slug(conn, wanted: str, post_id: str | None) -> str:
    """`wanted`, or `wanted-2`, `-3`… when another post has it (as the reference platform does)."""
    taken = {r["slug"] for r in await conn.fetch(
        "SELECT slug FROM posts WHERE (slug = $1 OR slug LIKE $1 || '-%') AND id IS DISTINCT FROM $2", wanted, post_id)}
    if wanted not in taken:
        return wanted
    return next(f"{wanted}-{n}" for n in range(2, len(taken) + 3) if f"{wanted}-{n}" not in taken)


async def _newsletter_id(conn, newsletter: str | None) -> str | None:
    if not newsletter:
        return None
    found = await conn.fetchval("SELECT id FROM newsletters WHERE (id = $1 OR slug = $1) AND status = 'active' "
                                "ORDER BY id = $1 DESC LIMIT 1", newsletter)
    if found is None:
        raise NotFound(f"no active newsletter has the id or slug {newsletter}")
    return found


def _content(change: PostChange) -> dict[str, Any]:
    """The post's content columns from the one form it was given in (none: nothing changes)."""
    given = [f for f in (change.lexical, change.mobiledoc, change.html, change.markdown) if f is not None]
    if len(given) > 1 and (change.lexical is not None or change.mobiledoc is not None):
        raise BadInput("give the post's content as Lexical, mobiledoc, HTML or Markdown, one of the four")
    fields: dict[str, Any]
    if change.lexical is not None:
        fields = {**post_lexical(change.lexical), "mobiledoc": None}
    elif change.mobiledoc is not None:
        fields = {**post_mobiledoc(change.mobiledoc), "lexical": None}
    elif change.html is not None or change.markdown is not None:
        fields = {"html": post_html(change.html, change.markdown), "lexical": None, "mobiledoc": None,
                  "email_html": ""}
    else:
        return {}
    fields["plaintext"] = post_text(fields["email_html"] or fields["html"])
    return fields


MAX_TERMS = 100  # tags or authors on one post


def _tag(tag: TagRef) -> tuple[str, str | None]:
    """(slug, name): a name starting with # is an internal tag, its slug `hash-…` as the reference makes it."""
    name = free_text(tag.name, "tag name", 191) if tag.name is not None else None
    if tag.slug:
        return slug_input(tag.slug, "tag slug"), name
    if not name:
        raise BadInput("each tag needs a name or a slug")
    return ("hash-" + slug_of(name[1:]) if name.startswith("#") else slug_of(name)), name


def _author(author: AuthorRef) -> dict[str, str | None]:
    name = free_text(author.name, "author name", 191) if author.name is not None else None
    if not (author.id or author.slug or author.email or name):
        raise BadInput("each author needs an id, a slug, an email or a name")
    return {"id": entity_id(author.id, "author") if author.id else None,
            "slug": slug_input(author.slug, "author slug") if author.slug else None,
            "email": email_address(author.email, "author email") if author.email else None,
            "name": name, "new_slug": slug_of(name) if name else None}


def _checked(change: PostChange) -> dict[str, Any]:
    """Every input of the change checked before anything is written: {column or key: value}."""
    fields: dict[str, Any] = {}
    if change.title is not None:
        fields["title"] = _title(change.title)
    if change.slug is not None:
        fields["slug"] = slug_input(change.slug, "post slug")
    fields.update(_content(change))
    if change.custom_excerpt is not None:
        fields["custom_excerpt"] = free_text(change.custom_excerpt, "excerpt", 300)
    if change.feature_image is not None:
        image = change.feature_image.strip()
        if image and not re.fullmatch(r"https?://[^\s\"'<>]{1,2000}", image):
            raise BadInput("feature_image must be an http(s) address")
        fields["feature_image"] = image or None
    for name, most in (("feature_image_alt", 191), ("meta_title", 300), ("meta_description", 500)):
        if getattr(change, name) is not None:
            fields[name] = free_text(getattr(change, name), name.replace("_", " "), most)
    if change.feature_image_caption is not None:
        fields["feature_image_caption"] = post_html(html=change.feature_image_caption) or None
    if change.segment is not None:
        fields["email_recipient_filter"] = _segment(change.segment)
    if change.visibility is not None:
        fields["visibility"] = _visibility(change.visibility)
    if change.tiers is not None:
        fields["tiers"] = list(dict.fromkeys(slug_input(t, "tier") for t in change.tiers))
    fields.update(_terms(change))
    _check_time(change)
    return fields


def _terms(change: PostChange) -> dict[str, Any]:
    """The post's tags and authors as given, checked (absent: left as they are)."""
    fields: dict[str, Any] = {}
    for name, given in (("tags", change.tags), ("authors", change.authors)):
        if given is not None and len(given) > MAX_TERMS:
            raise BadInput(f"a post has at most {MAX_TERMS} {name}; {len(given)} were given")
    if change.tags is not None:
        fields["tags"] = list(dict(_tag(t) for t in change.tags).items())
    if change.authors is not None:
        fields["authors"] = [_author(a) for a in change.authors]
    return fields


# A client's clock may run a little ahead of ours: a "published" time this far ahead is now.
_CLOCK_SLACK_SECONDS = 60


def _check_time(change: PostChange) -> None:
    """A scheduled post's time is in the future; a published one's, when given, is not (a backdated post)."""
    if change.at is not None and change.at.tzinfo is None:
        raise BadInput("the publication time needs a UTC offset")
    if change.status == "scheduled":
        if change.at is None:
            raise BadInput("a scheduled post needs its time (--at, published_at)")
        if change.at <= datetime.now(UTC):
            raise BadInput("a scheduled post's time must be in the future; publish it instead")
    if change.status == "published" and change.at is not None \
            and (change.at - datetime.now(UTC)).total_seconds() > _CLOCK_SLACK_SECONDS:
        raise BadInput("a published post's published_at is in the future; schedule it instead")


async def _write_post(conn, post_id: str, fields: dict[str, Any], newsletter: str | None, site_url: str) -> None:
    """The checked fields, the post's tiers and its email, in the caller's transaction."""
    fields = dict(fields)
    tiers = fields.pop("tiers", None)
    tags, authors = fields.pop("tags", None), fields.pop("authors", None)
    if newsletter is not None:
        fields["newsletter_id"] = await _newsletter_id(conn, newsletter)
    new = "title" in fields and await conn.fetchval("SELECT slug = '' FROM posts WHERE id = $1", post_id)
    if "slug" in fields or new:  # a new post's slug comes from its title
        fields["slug"] = await _free_slug(conn, fields.get("slug") or slug_of(fields["title"]), post_id)
    if "slug" in fields or "email_html" in fields:
        fields.update(await _email_html_at(conn, post_id, fields, site_url))
    if fields:
        sets = ", ".join(f"{column} = ${i + 2}" for i, column in enumerate(fields))
        await conn.execute(f"UPDATE posts SET {sets}, updated_at = now() WHERE id = $1", post_id, *fields.values())
    if tags is not None:
        await post_store.write_tags(conn, post_id, tags)
    if authors is not None:
        await post_store.write_authors(conn, post_id, authors)
    if tiers is not None:
        found = {r["slug"]: r["id"] for r in await conn.fetch("SELECT slug, id FROM products WHERE slug = ANY($1)",
                                                             tiers)}
        absent = [t for t in tiers if t not in found]
        if absent:
            raise NotFound(f"no tier {', '.join(absent)}")
        await conn.execute("DELETE FROM posts_products WHERE post_id = $1", post_id)
        await conn.execute("INSERT INTO posts_products (post_id, product_id, sort_order) "
                           "SELECT $1, t.id, t.n FROM unnest($2::text[]) WITH ORDINALITY AS t(id, n)",
                           post_id, [found[t] for t in tiers])
    visibility, tiered = await conn.fetchrow(
        "SELECT visibility, EXISTS (SELECT 1 FROM posts_products WHERE post_id = $1) FROM posts WHERE id = $1",
        post_id)
    if visibility == "tiers" and not tiered:
        raise BadInput("a post for tiers needs at least one tier (--tier)")
    await _sync_email(conn, post_id)


async def _sync_email(conn, post_id: str) -> None:
    """The post's email follows the post while nothing of it was sent: made when the post has a
    newsletter, its subject and audience kept as the post's, gone when the newsletter is taken off.
    Its body is the post's at send time (emails.html stays empty)."""
    untouched = "AND NOT EXISTS (SELECT 1 FROM email_batches b WHERE b.email_id = emails.id)"
    await conn.execute(
        f"DELETE FROM emails WHERE post_id = $1 AND status = 'pending' {untouched} "
        "AND (SELECT newsletter_id FROM posts WHERE id = $1) IS NULL", post_id)
    await conn.execute(
        "INSERT INTO emails (post_id, newsletter_id, subject, recipient_filter) "
        "SELECT id, newsletter_id, title, email_recipient_filter FROM posts "
        "WHERE id = $1 AND newsletter_id IS NOT NULL "
        "ON CONFLICT (post_id) DO UPDATE SET newsletter_id = EXCLUDED.newsletter_id, subject = EXCLUDED.subject, "
        "recipient_filter = EXCLUDED.recipient_filter, created_at = now(), updated_at = now() "
        f"WHERE emails.status = 'pending' {untouched}", post_id)


async def _email_html_at(conn, post_id: str, fields: dict[str, Any], site_url: str) -> dict[str, str]:
    """An editor's document's email HTML rendered again once the post's address is known: its audio,
    video and file cards link to the post's page, as nothing plays in a mail client."""
    row = await conn.fetchrow("SELECT slug, lexical, mobiledoc FROM posts WHERE id = $1", post_id)
    slug = fields.get("slug") or row["slug"]
    source = {name: fields[name] if name in fields else row[name] for name in ("lexical", "mobiledoc")}
    url = f"{site_url.rstrip('/')}/{slug}/"
    if source["lexical"]:
        html = post_html(lexical.render(source["lexical"], "email", url))
    elif source["mobiledoc"]:
        html = post_html(mobiledoc.render(source["mobiledoc"], "email", url))
    else:
        return {}
    return {"email_html": html, "plaintext": post_text(html)}


def _publish_at(change: PostChange) -> datetime | None:
    """When publication is due: the scheduled time; for published, now, or the time given for a
    backdated post (a past time publishes at once and is kept as the post's published_at)."""
    now = datetime.now(UTC)
    if change.status == "scheduled":
        return change.at
    return min(change.at, now) if change.at is not None else now


@tracing.traced("pressroom posts add")
async def add_post(change: PostChange, *, client=None, settings: Settings | None = None,
                   pool: asyncpg.Pool | None = None) -> Post:
    """A post from HTML or Markdown, with its email when it has a newsletter; scheduled or published
    through its durable timer. Refused whole: a post whose publication cannot be started is removed."""
    change = change.model_copy(update={"title": _title(change.title)})
    fields = _checked(change)
    fields.setdefault("visibility", "public")
    fields.setdefault("email_recipient_filter", "all")
    if "html" not in fields:
        fields["html"], fields["plaintext"] = "", ""
    settings = settings or get_settings()
    async with database.connection(settings.require_database(), pool) as conn:
        async with conn.transaction():
            post_id = await conn.fetchval("INSERT INTO posts (title, slug) VALUES ($1, '') RETURNING id",
                                          fields["title"])
            tracing.annotate(post_id=post_id)
            await _write_post(conn, post_id, fields, change.newsletter, settings.site_url)
        if change.status in ("scheduled", "published"):
            try:
                published = await _publish(post_id, change, client, settings, pool=pool)
            except BaseException:
                await conn.execute("DELETE FROM posts WHERE id = $1", post_id)
                raise
            await _published_soon(published, post_id, change)
        return await read_post(conn, post_id)


@tracing.traced("pressroom posts edit", "post_id")
async def edit_post(post: str, change: PostChange, *, client=None, settings: Settings | None = None,
                    pool: asyncpg.Pool | None = None) -> Post:
    """Change a post (by id or slug): content, audience, newsletter, and its state by the rules of
    `posts schedule`/`unschedule` (a draft or scheduled post may be scheduled or published; a
    scheduled one may go back to draft; a published one may go back to draft, unpublished). With `updated_at`, a post
    changed since is refused (UpdateCollision), nothing written."""
    entity_id(post, "post")
    fields = _checked(change)
    settings = settings or get_settings()
    async with database.connection(settings.require_database(), pool) as conn:
        current = await read_post(conn, post)
        tracing.annotate(post_id=current.id)

        async def write(conn) -> None:
            stamp = await conn.fetchval("SELECT updated_at FROM posts WHERE id = $1 FOR UPDATE", current.id)
            # Compared to the millisecond: the reference's API writes times to the millisecond.
            if change.updated_at is not None and _to_ms(stamp) != _to_ms(change.updated_at):
                raise UpdateCollision("Saving failed! Someone else is editing this post.")
            await _write_post(conn, current.id, fields, change.newsletter, settings.site_url)

        target = change.status
        if change.newsletter and current.status == "published":
            raise BadInput(f"post {current.id} is already published; a newsletter goes out only when its post is "
                           "published or scheduled")
        if current.status == "published" and target in (None, "published"):
            if change.at is not None:  # a published post backdated (or moved) as the reference allows
                fields["published_at"] = min(change.at, datetime.now(UTC))
            async with conn.transaction():
                previous = await site_events.before(conn, "post.published.edited", current.id, settings.site_url)
                await write(conn)
                await site_events.emit(conn, "post.published.edited", current.id, previous, site_url=settings.site_url)
        elif target is None or target == current.status == "draft":
            async with conn.transaction():
                await write(conn)
        elif target == "draft" and current.status == "published":
            async with conn.transaction():
                await write(conn)
                await _unpublish(conn, current.id, settings)
        elif target == "draft":
            await change_post(current.id, None, await _client(client, settings), settings, write=write, pool=pool)
        else:
            published = await _publish(current.id, change, client, settings, write=write, pool=pool)
            await _published_soon(published, current.id, change)
        return await read_post(conn, current.id)


async def _unpublish(conn, post_id: str, settings: Settings) -> None:
    """A published post back to draft, as the reference allows; refused while its email is being sent
    (cancel the send first). Its email's record, sent or not, stays."""
    sending = await conn.fetchval("SELECT id FROM emails WHERE post_id = $1 AND status = 'submitting'", post_id)
    if sending:
        raise BadInput(f"post {post_id} has email {sending} sending; cancel it first "
                       f"(pressroom newsletter cancel {sending}), then unpublish")
    previous = await site_events.before(conn, "post.unpublished", post_id, settings.site_url)
    await conn.execute("UPDATE posts SET status = 'draft', updated_at = now() WHERE id = $1", post_id)
    await site_events.emit(conn, "post.unpublished", post_id, previous, site_url=settings.site_url)


def _to_ms(moment: datetime) -> datetime:
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


async def _client(client, settings: Settings):
    return await resolve_client(client, settings)


async def _publish(post_id: str, change: PostChange, client, settings: Settings, write=None,
                   pool: asyncpg.Pool | None = None) -> Client:
    """The post scheduled (or published at once) through its timer; the client that told it."""
    told = await _client(client, settings)
    await change_post(post_id, _publish_at(change), told, settings, write=write, at_once=change.status == "published",
                      pool=pool)
    return told


async def _published_soon(client: Client, post_id: str, change: PostChange, seconds: float = 10.0) -> None:
    """Published now: the timer publishes at once; wait (bounded) for its run to end, so the answer
    shows it published. Without a worker the post stays scheduled for now and is published when one
    runs; a run that failed leaves the post as its row says."""
    if change.status != "published":
        return
    with contextlib.suppress(TimeoutError, WorkflowFailureError, RPCError):
        await asyncio.wait_for(client.get_workflow_handle(publish_workflow_id(post_id)).result(), seconds)


@tracing.traced("pressroom posts delete", "post_id")
async def delete_post(post: str, *, client=None, settings: Settings | None = None,
                      pool: asyncpg.Pool | None = None) -> str:
    """Delete a post (by id or slug) and its unsent email; its timer stops. A post whose email has
    started sending keeps its record: refused."""
    entity_id(post, "post")
    settings = settings or get_settings()
    async with database.connection(settings.require_database(), pool) as conn:
        async with conn.transaction():
            row = await conn.fetchrow("SELECT p.id, p.status, e.id AS email_id, e.status AS email_status FROM posts p "
                                      "LEFT JOIN emails e ON e.post_id = p.id WHERE p.id = $1 OR p.slug = $1 "
                                      "ORDER BY p.id = $1 DESC LIMIT 1 FOR UPDATE OF p", post)
            if row is None:
                raise NotFound(f"post {post} does not exist")
            if row["email_id"] and (row["email_status"] not in ("pending", "cancelled") or await conn.fetchval(
                    "SELECT EXISTS (SELECT 1 FROM email_batches WHERE email_id = $1)", row["email_id"])):
                raise BadInput(f"post {row['id']} has email {row['email_id']} ({row['email_status']}), which has "
                               "started sending; the post and its email's record stay")
            await conn.execute("DELETE FROM posts WHERE id = $1", row["id"])
        if row["status"] == "scheduled":
            # After the commit: a timer that fires meanwhile finds no post and publishes nothing.
            await tell_post_workflow(await _client(client, settings), settings, row["id"], None)
    return row["id"]


# --- a failed email, sent again ------------------------------------------------------------------

@tracing.traced("pressroom newsletter retry", "email_id")
async def retry_email(email_id: str, *, recipient_filter: str | None = None, subject: str | None = None,
                      client=None, settings: Settings | None = None, pool: asyncpg.Pool | None = None) -> EmailRetry:
    """Correct a failed email (its filter while no batch was written, its subject while none was
    sent) and start its send again, as the reference platform's `POST emails/{id}/retry/`."""
    entity_id(email_id, "email")
    new_filter = _segment(recipient_filter) if recipient_filter is not None else None
    new_subject = free_text(subject, "subject", 300) if subject is not None else None
    if subject is not None and new_subject is None:
        raise BadInput("the subject may not be empty")
    settings = settings or get_settings()
    async with database.connection(settings.require_database(), pool) as conn, conn.transaction():
        email = await conn.fetchrow(
            "SELECT status, EXISTS (SELECT 1 FROM email_batches b WHERE b.email_id = e.id) AS batched, "
            "EXISTS (SELECT 1 FROM email_batches b WHERE b.email_id = e.id AND b.status = 'submitted') AS sent "
            "FROM emails e WHERE id = $1 FOR UPDATE", email_id)
        if email is None:
            raise NotFound(f"email {email_id} does not exist")
        if email["status"] != "failed":
            raise BadInput(f"email {email_id} is {email['status']}; only a failed email is sent again")
        if new_filter is not None and email["batched"]:
            raise BadInput(f"email {email_id} already has its batches for its filter; the filter can be "
                           "corrected only before any batch was written")
        if new_subject is not None and email["sent"]:
            raise BadInput(f"email {email_id} already reached some readers; its subject stays")
        await conn.execute("UPDATE emails SET recipient_filter = coalesce($2, recipient_filter), "
                           "subject = coalesce($3, subject), error = NULL, error_data = NULL, updated_at = now() "
                           "WHERE id = $1", email_id, new_filter, new_subject)
    start = await start_newsletter(email_id, client=await _client(client, settings), settings=settings)
    return EmailRetry(email_id=email_id, workflow_id=start.workflow_id, started=start.started, message=start.message)


# --- tiers and labels ----------------------------------------------------------------------------

async def _add_named(table: str, name: str, slug: str | None, extra: dict[str, Any], settings: Settings | None,
                     pool: asyncpg.Pool | None = None):
    checked = free_text(name, "name")
    if checked is None:
        raise BadInput("a name is required")
    fields = {"name": checked, "slug": slug_input(slug, "slug") if slug else slug_of(checked), **extra}
    settings = settings or get_settings()
    async with database.connection(settings.require_database(), pool) as conn:
        try:
            places = ", ".join(f"${i + 1}" for i in range(len(fields)))
            return await conn.fetchrow(f"INSERT INTO {table} ({', '.join(fields)}) VALUES ({places}) RETURNING *",
                                       *fields.values())
        except asyncpg.UniqueViolationError:
            raise BadInput(f"the slug {fields['slug']!r} is taken") from None


async def add_tier(name: str, *, slug: str | None = None, type: str = "paid", settings: Settings | None = None,
                   pool: asyncpg.Pool | None = None):
    """A tier (the reference's `products` row); members and posts name it by its slug."""
    if type not in ("free", "paid"):
        raise BadInput(f"tier type {type!r} is not one of free, paid")
    return await _add_named("products", name, slug, {"type": type}, settings, pool)


async def add_label(name: str, *, slug: str | None = None, settings: Settings | None = None,
                    pool: asyncpg.Pool | None = None):
    """A label by its name (pressroom/store/labels.py: the reference's slug, made unique)."""
    checked = free_text(name, "name")
    if checked is None:
        raise BadInput("a name is required")
    settings = settings or get_settings()
    async with database.connection(settings.require_database(), pool) as conn:
        return await labels.add_label(conn, checked, slug_input(slug, "slug") if slug else None)

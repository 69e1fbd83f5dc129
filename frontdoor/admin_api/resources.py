"""The Admin API's resources: each handler reads the request, calls the operation the CLI calls
(operations/authoring.py, operations/members.py), and answers in the reference platform's shape.
Reads that no operation has yet (browse) are here, as parameterised SQL over each resource's
own fields."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from frontdoor.admin_api.envelope import Browse, browse_options, invalid, iso, not_found, project, simple_filter
from frontdoor.admin_api.recent import MemberReads
from operations import authoring, members
from pressroom.errors import BadInput
from pressroom.recipient_filter import FilterError, Node, Term, parse, parse_posts
from pressroom.settings import Settings
from pressroom.store import labels as labels_store
from pressroom.store.audience import filter_sql
from pressroom.store.labels import label_pairs
from pressroom.store.posts import filter_sql as post_filter_sql

# Fields a client may send back as it read them: never written, never refused.
_READ_ONLY = {"id", "uuid", "url", "created_at", "published_by", "comment_id", "excerpt", "email", "newsletter",
              "count", "primary_author", "primary_tag", "reading_time", "plaintext", "email_count", "meta",
              "email_opened_count", "email_open_rate", "subscriptions", "avatar_image", "geolocation",
              "last_seen_at", "email_suppression", "attribution", "frontend", "sort_order", "updated_at",
              "unsubscribe_url"}


def _unsupported_fields(item: dict, writable: set[str], what: str) -> None:
    """A field Pressroom does not keep, given a value, is refused by name (never dropped silently);
    given empty (as a client sends back what it read), it is let through. The fields listed as
    written are those `writable` names, each one Pressroom takes."""
    for key, value in item.items():
        if key in writable or key in _READ_ONLY or value in (None, False, "", [], {}):
            continue
        raise invalid(f"{what}.{key} is not supported by Pressroom", property=key,
                      context=f"{what} fields Pressroom writes: {', '.join(sorted(writable))}")


def item_of(body: Any, resource: str) -> dict:
    """The one object of `{resource: [object]}`."""
    items = body.get(resource) if isinstance(body, dict) else None
    if not isinstance(items, list) or len(items) != 1 or not isinstance(items[0], dict):
        raise invalid(f"the body must be {{\"{resource}\": [one object]}}", property=resource)
    return items[0]


def _time(value: Any, field: str) -> datetime | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise invalid(f"{field} must be an ISO 8601 time", property=field)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise invalid(f"{field} must be an ISO 8601 time", property=field) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def text_of(item: dict, field: str) -> str | None:
    value = item.get(field)
    if value is not None and not isinstance(value, str):
        raise invalid(f"{field} must be text", property=field)
    return value


# --- site ----------------------------------------------------------------------------------------

def site(settings: Settings) -> dict:
    url = settings.site_url.rstrip("/") + "/"
    return {"site": {"title": "Pressroom", "description": None, "logo": None, "icon": None, "accent_color": None,
                     "locale": "en", "url": url, "version": "6.0"}}


# --- posts ---------------------------------------------------------------------------------------

POST_FIELDS = ("id", "uuid", "title", "slug", "html", "plaintext", "comment_id", "feature_image", "featured",
               "feature_image_alt", "feature_image_caption", "meta_title", "meta_description", "primary_tag",
               "primary_author", "lexical", "mobiledoc",
               "status", "visibility", "created_at", "updated_at", "published_at", "custom_excerpt", "excerpt",
               "email_segment", "newsletter", "email", "tiers", "tags", "authors", "url", "email_only")
POST_INCLUDES = ("tags", "authors", "tiers", "newsletter", "email", "count.clicks", "count.signups",
                 "count.paid_conversions", "sentiment", "post_revisions")
_POST_ORDER = {"created_at": "p.created_at", "updated_at": "p.updated_at", "published_at": "p.published_at",
               "title": "p.title", "id": "p.id", "slug": "p.slug", "status": "p.status"}
_POST_WRITABLE = {"title", "slug", "html", "lexical", "mobiledoc", "status", "published_at", "visibility", "tiers",
                  "tags", "authors",
                  "custom_excerpt", "updated_at", "email_segment", "feature_image", "feature_image_alt",
                  "feature_image_caption", "meta_title", "meta_description"}
_POST_PICTURE = ("feature_image", "feature_image_alt", "feature_image_caption", "meta_title", "meta_description")


def post_json(post: authoring.Post, settings: Settings, formats: set[str]) -> dict:
    item = {
        "id": post.id, "uuid": post.uuid, "title": post.title, "slug": post.slug, "html": post.html,
        "comment_id": post.id, **{name: getattr(post, name) for name in _POST_PICTURE}, "featured": False,
        "status": post.status,
        "visibility": post.visibility, "created_at": iso(post.created_at), "updated_at": iso(post.updated_at),
        "published_at": iso(post.published_at), "custom_excerpt": post.custom_excerpt,
        "excerpt": post.custom_excerpt or post.plaintext[:500], "email_segment": post.email_segment,
        "newsletter": {"slug": post.newsletter} if post.newsletter else None,
        "email": {"id": post.email_id, "status": post.email_status} if post.email_id else None,
        "tiers": [{"slug": t} for t in post.tiers], **_terms_json(post, settings),
        "url": f"{settings.site_url.rstrip('/')}/{post.slug}/", "email_only": False,
    }
    if "plaintext" in formats:
        item["plaintext"] = post.plaintext
    for name in ("lexical", "mobiledoc"):
        if name in formats:
            item[name] = getattr(post, name)
    return item


_FORMATS = {"html", "plaintext", "lexical", "mobiledoc"}


def _terms_json(post: authoring.Post, settings: Settings) -> dict:
    """tags and authors as the reference answers them, with primary_tag (the first tag, when public)
    and primary_author."""
    site = settings.site_url.rstrip("/")
    tags = [{**t, "feature_image": None, "og_image": None, "og_title": None, "og_description": None,
             "twitter_image": None, "twitter_title": None, "twitter_description": None, "meta_title": None,
             "meta_description": None, "codeinjection_head": None, "codeinjection_foot": None,
             "canonical_url": None, "accent_color": None, "created_at": iso(_stamp(t["created_at"])),
             "updated_at": iso(_stamp(t["updated_at"])), "url": f"{site}/tag/{t['slug']}/"} for t in post.tags]
    authors = [{**a, "profile_image": None, "cover_image": None, "bio": None, "website": None, "location": None,
                "facebook": None, "twitter": None, "meta_title": None, "meta_description": None,
                "created_at": iso(_stamp(a["created_at"])), "updated_at": iso(_stamp(a["updated_at"])),
                "url": f"{site}/author/{a['slug']}/"} for a in post.authors]
    primary_tag = tags[0] if tags and tags[0]["visibility"] == "public" else None
    return {"tags": tags, "authors": authors, "primary_tag": primary_tag,
            "primary_author": authors[0] if authors else None}


def _stamp(value: str) -> datetime:
    return datetime.fromisoformat(value)


def formats_of(query) -> set[str]:
    formats = {f.strip() for f in (query.get("formats") or "html").split(",") if f.strip()}
    if formats - _FORMATS:
        raise invalid(f"formats {', '.join(sorted(formats - _FORMATS))} not supported", property="formats",
                      context="Pressroom keeps a post's content as html, plaintext, lexical and mobiledoc")
    return formats


async def browse_posts(conn, query, settings: Settings) -> dict:
    options = browse_options(query, orderable=_POST_ORDER, default_order="updated_at desc", includes=POST_INCLUDES,
                             known_fields=POST_FIELDS)
    formats = formats_of(query)
    try:
        where, values = post_filter_sql(parse_posts(options.filter), 1) if options.filter else ("TRUE", [])
    except FilterError as error:
        raise invalid(f"filter: {error}", property="filter",
                      context="posts filter by tag, author, status, slug, id, uuid, visibility and newsletter, "
                              "and published_at, created_at or updated_at compared (published_at:>'2026-01-01')") \
            from None
    base = f"{authoring.POST_QUERY} WHERE {where}"
    total = await conn.fetchval(f"SELECT count(*) FROM ({base}) counted", *values)
    rows = await conn.fetch(f"{base} {_order_sql(options)} {_page_sql(options, len(values))}", *values,
                            *_page_values(options))
    posts = [project(post_json(authoring.Post(**dict(r)), settings, formats), options.fields) for r in rows]
    return {"posts": posts, "meta": options.pagination(total)}


def _order_sql(options: Browse) -> str:
    return "ORDER BY " + ", ".join(f"{c} {d}" for c, d in options.order) + ", 1 DESC"


def _page_sql(options: Browse, used: int) -> str:
    return "" if options.limit is None else f"LIMIT ${used + 1} OFFSET ${used + 2}"


def _page_values(options: Browse) -> list[int]:
    return [] if options.limit is None else [options.limit, options.offset]


async def post_change(conn, item: dict, query, *, adding: bool) -> authoring.PostChange:
    """The reference's post body and query (`source`, `newsletter`, `email_segment`) as a change."""
    _unsupported_fields(item, _POST_WRITABLE, "posts")
    documents = {name: item.get(name) or None for name in ("lexical", "mobiledoc")}
    for name, sent in documents.items():
        if sent is not None and not isinstance(sent, str):
            raise invalid(f"{name} must be the document as JSON text", property=name)
    if documents["lexical"] and documents["mobiledoc"]:
        raise invalid("send the post's content as lexical or as mobiledoc, not both", property="mobiledoc")
    document = documents["lexical"] or documents["mobiledoc"]
    html = text_of(item, "html")
    if document is not None and query.get("source") == "html" and html:
        raise invalid("send the post's content as lexical or as html, not both", property="html")
    if document is not None:  # the reference's editor sends its html back as it read it: its document wins
        html = None
    elif html and query.get("source") != "html":
        raise invalid("html is read only with ?source=html", property="html",
                      context="add ?source=html to send the post's content as HTML")
    status = item.get("status")
    if status is not None and status not in authoring.POST_STATUSES:
        raise invalid(f"status {str(status)[:20]!r} is not one of {', '.join(authoring.POST_STATUSES)}",
                      property="status")
    tiers = item.get("tiers")
    if tiers is not None:
        tiers = await _tier_slugs(conn, tiers)
    newsletter = query.get("newsletter")
    if newsletter is not None and status not in ("published", "scheduled"):
        raise invalid("?newsletter is for a post being published or scheduled", property="newsletter")
    segment = query.get("email_segment") or (item.get("email_segment") if newsletter else None)
    try:
        return authoring.PostChange(
            title=text_of(item, "title") if adding or "title" in item else None, slug=text_of(item, "slug"),
            html=None if document is not None else (html or "") if (html is not None or adding) else None,
            lexical=documents["lexical"], mobiledoc=documents["mobiledoc"],
            **{name: text_of(item, name) for name in _POST_PICTURE},
            custom_excerpt=text_of(item, "custom_excerpt"),
            status=status, at=_time(item.get("published_at"), "published_at") if status in ("scheduled", "published")
            else None, tags=_refs(await _tags_by_id(conn, item), "tags", ("name", "slug", "id"), authoring.TagRef),
            authors=_refs(item, "authors", ("id", "name", "slug", "email"), authoring.AuthorRef),
            newsletter=newsletter, segment=segment if newsletter or segment else None,
            visibility=text_of(item, "visibility"), tiers=tiers, updated_at=_time(item.get("updated_at"), "updated_at"))
    except ValueError as error:
        raise invalid(str(error).splitlines()[0]) from None


def _refs(item: dict, field: str, keys: tuple[str, ...], model):
    """Tags or authors as the reference takes them: names, or objects naming one by its keys; absent: None."""
    given = item.get(field)
    if given is None:
        return None
    if not isinstance(given, list):
        raise invalid(f"{field} must be a list", property=field)
    refs = []
    for ref in given:
        if isinstance(ref, str):
            ref = {"name": ref}
        if not isinstance(ref, dict) or not all(isinstance(ref.get(k), (str, type(None))) for k in keys) \
                or not any(ref.get(k) for k in keys):
            raise invalid(f"each of {field} is a name or an object with {', '.join(keys[:-1])} or {keys[-1]}",
                          property=field)
        refs.append(model(**{k: ref.get(k) for k in keys}))
    return refs


async def _tags_by_id(conn, item: dict) -> dict:
    """The item with each tag named by its id alone given its slug too (a tag as the client read it)."""
    given = item.get("tags")
    if not isinstance(given, list):
        return item
    ids = [t["id"] for t in given if isinstance(t, dict) and isinstance(t.get("id"), str) and not t.get("slug")]
    if not ids:
        return item
    slugs = {r["id"]: r["slug"] for r in await conn.fetch("SELECT id, slug FROM tags WHERE id = ANY($1)", ids)}
    if len(slugs) < len(set(ids)):
        raise not_found("tag")
    return {**item, "tags": [{**t, "slug": slugs[t["id"]]} if isinstance(t, dict) and t.get("id") in slugs
                             and not t.get("slug") else t for t in given]}


async def _tier_slugs(conn, tiers: Any) -> list[str]:
    if not isinstance(tiers, list) or not all(isinstance(t, dict) for t in tiers):
        raise invalid("tiers must be a list of objects with an id or a slug", property="tiers")
    ids = [t["id"] for t in tiers if isinstance(t.get("id"), str)]
    by_id = {r["id"]: r["slug"] for r in await conn.fetch("SELECT id, slug FROM products WHERE id = ANY($1)", ids)}
    slugs = []
    for tier in tiers:
        slug = by_id.get(tier.get("id")) or tier.get("slug")
        if not isinstance(slug, str):
            raise not_found("tier")
        slugs.append(slug)
    return slugs


# --- newsletters ---------------------------------------------------------------------------------

NEWSLETTER_FIELDS = ("id", "uuid", "name", "description", "slug", "sender_name", "sender_email", "sender_reply_to",
                     "status", "visibility", "subscribe_on_signup", "sort_order", "created_at", "updated_at",
                     *authoring.DESIGN_FIELDS)
_NEWSLETTER_WRITABLE = {"name", "slug", "sender_name", "sender_email", "sender_reply_to", "status",
                        "subscribe_on_signup", "visibility", "description", *authoring.DESIGN_FIELDS}


def newsletter_json(n: authoring.Newsletter) -> dict:
    return {"id": n.id, "uuid": n.uuid, "name": n.name, "description": None, "slug": n.slug,
            "sender_name": n.sender_name, "sender_email": n.sender_email, "sender_reply_to": n.sender_reply_to,
            "status": n.status, "visibility": "members", "subscribe_on_signup": n.subscribe_on_signup,
            "sort_order": 0, "created_at": iso(n.created_at), "updated_at": iso(n.updated_at),
            **{name: getattr(n, name) for name in authoring.DESIGN_FIELDS}}


def newsletter_fields(item: dict) -> dict[str, Any]:
    _unsupported_fields(item, _NEWSLETTER_WRITABLE, "newsletters")
    if item.get("visibility") not in (None, "members"):
        raise invalid("newsletters.visibility other than members is not supported", property="visibility")
    fields: dict[str, Any] = {k: text_of(item, k) for k in ("name", "sender_name", "sender_email",
                                                           "sender_reply_to", "status") if k in item}
    if "subscribe_on_signup" in item:
        if not isinstance(item["subscribe_on_signup"], bool):
            raise invalid("subscribe_on_signup must be true or false", property="subscribe_on_signup")
        fields["subscribe_on_signup"] = item["subscribe_on_signup"]
    design: dict[str, Any] = {}
    for name in authoring.DESIGN_FIELDS:
        if name in item:
            try:
                design.update(authoring.design_fields({name: item[name]}))
            except BadInput as error:
                raise invalid(str(error), property=name) from None
    if design:
        fields["design"] = design
    return fields


# --- members -------------------------------------------------------------------------------------

MEMBER_FIELDS = ("id", "uuid", "email", "name", "note", "status", "comped", "subscribed", "labels", "newsletters",
                 "tiers", "email_count", "email_opened_count", "email_open_rate", "email_suppression",
                 "created_at", "updated_at")
MEMBER_INCLUDES = ("labels", "newsletters", "tiers", "email_recipients")
_MEMBER_ORDER = {"created_at": "m.created_at", "updated_at": "m.updated_at", "email": "m.email", "name": "m.name",
                 "id": "m.id", "email_count": "m.email_count", "email_open_rate": "m.email_open_rate"}
_MEMBER_WRITABLE = {"email", "name", "note", "labels", "newsletters", "comped", "subscribed", "status", "tiers"}

MEMBER_QUERY = """
SELECT m.id, m.uuid::text AS uuid, m.email, m.name, m.note, m.status, m.email_count, m.email_opened_count,
       m.email_open_rate, m.created_at, m.updated_at,
       coalesce((SELECT json_agg(json_build_object('id', l.id, 'name', l.name, 'slug', l.slug) ORDER BY l.slug)
                 FROM members_labels ml JOIN labels l ON l.id = ml.label_id WHERE ml.member_id = m.id), '[]') AS labels,
       coalesce((SELECT json_agg(json_build_object('id', n.id, 'name', n.name, 'slug', n.slug, 'status', n.status)
                                 ORDER BY n.created_at)
                 FROM members_newsletters mn JOIN newsletters n ON n.id = mn.newsletter_id
                 WHERE mn.member_id = m.id), '[]') AS newsletters,
       coalesce((SELECT json_agg(json_build_object('id', p.id, 'name', p.name, 'slug', p.slug, 'type', p.type,
                                                   'expiry_at', mp.expiry_at) ORDER BY p.slug)
                 FROM members_products mp JOIN products p ON p.id = mp.product_id WHERE mp.member_id = m.id),
                '[]') AS tiers,
       EXISTS (SELECT 1 FROM suppressions s WHERE s.email = m.email) AS suppressed
FROM members m"""


def member_json(row) -> dict:
    newsletters = json.loads(row["newsletters"])
    return {"id": row["id"], "uuid": row["uuid"], "email": row["email"], "name": row["name"], "note": row["note"],
            "status": row["status"], "comped": row["status"] == "comped", "subscribed": bool(newsletters),
            "labels": json.loads(row["labels"]), "newsletters": newsletters, "tiers": json.loads(row["tiers"]),
            "email_count": row["email_count"], "email_opened_count": row["email_opened_count"],
            "email_open_rate": row["email_open_rate"], "avatar_image": None, "geolocation": None,
            "email_suppression": {"suppressed": row["suppressed"], "info": None},
            "created_at": iso(row["created_at"]), "updated_at": iso(row["updated_at"])}


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


# Terms of a member's own fields joined to the rest by `+` (the reference's NQL forms): the keyset a
# client pages deep with, `created_at:<'TIME'` (or >, <=, >=), read by an index instead of skipping
# rows with OFFSET; and the usual "find a member" step, `email:'a@b.c'` (or `email:['a@b.c','d@e.f']`)
# and `subscribed:true|false`. The rest is the recipient filter language.
_KEYSET = re.compile(r"(?:^|\+)\s*created_at:([<>]=?)'([^']{1,40})'\s*(?=\+|$)")
_OWN = re.compile(r"(?:^|\+)\s*(email|subscribed):(-?)('[^']{0,320}'|\[[^\]]{0,20000}\]|[^+,()\[\]'\s]{1,320})"
                  r"\s*(?=\+|$)")
_SUBSCRIBED = "EXISTS (SELECT 1 FROM members_newsletters mn WHERE mn.member_id = m.id)"


def keyset(text: str | None) -> tuple[str | None, list[tuple[str, Any]]]:
    """The filter without its own-field terms, and those terms: (SQL over `m` reading `$n`, value)."""
    if not text or not re.search(r"created_at|email|subscribed", text):
        return text, []
    terms: list[tuple[str, Any]] = []
    for op, value in _KEYSET.findall(text):
        moment = _time(value, "filter")
        if moment is not None:
            terms.append((f"m.created_at {op} $n", moment))
    for key, negated, value in _OWN.findall(text):
        terms.append(_own_term(key, bool(negated), value))
    rest = _OWN.sub("", _KEYSET.sub("", text)).strip().lstrip("+").strip()
    if re.search(r"\b(created_at|email|subscribed):", rest) or (terms and "," in rest):
        raise invalid("created_at, email and subscribed are taken as created_at:<'TIME' (or >, <=, >=), "
                      "email:'ADDRESS' (or email:[...]) and subscribed:true|false, joined to the rest with +",
                      property="filter")
    return rest or None, terms


def _own_term(key: str, negated: bool, value: str) -> tuple[str, Any]:
    if key == "subscribed":
        word = value.strip("'").lower()
        if word not in ("true", "false"):
            raise invalid("subscribed is true or false", property="filter")
        return f"{_SUBSCRIBED} = $n", (word == "true") != negated
    items = [v.strip().strip("'") for v in value[1:-1].split(",")] if value.startswith("[") else [value.strip("'")]
    addresses = [members.address_as_stored(v).lower() for v in items if v.strip()]
    return f"{'NOT ' if negated else ''}lower(m.email) = ANY($n::text[])", addresses


async def browse_members(conn, query, reads: MemberReads) -> dict:
    """Members by the recipient filter language (status, label, tier), created_at bounds (keyset),
    email and subscribed, and `search` (address or name). The filter's total and where each page began are reused for
    a few seconds (frontdoor/admin_api/recent.py): paging through a million members counts once."""

    options = browse_options(query, orderable=_MEMBER_ORDER, default_order="created_at desc",
                             includes=MEMBER_INCLUDES, known_fields=MEMBER_FIELDS)
    audience, bounds = keyset(options.filter)
    try:
        tree = parse(audience or "all")
        predicate, values = filter_sql(tree, as_of=datetime.now(UTC), post_id=None, param=1)
    except FilterError as error:
        raise invalid(f"filter: {error}", property="filter",
                      context="members filter by status, label and tier, in the recipient filter language") from None
    search = query.get("search")
    if search is not None and len(search) > 200:
        raise invalid("search is longer than 200 characters", property="search")
    args: list[Any] = [values, _like(search) if search else None]
    where = (f"WHERE {predicate} AND $1::text[] IS NOT NULL "
             "AND ($2::text IS NULL OR m.email ILIKE $2 OR m.name ILIKE $2)")
    for sql, value in bounds:
        args.append(value)
        where += " AND " + sql.replace("$n", f"${len(args)}")
    generation = reads.generation
    selection = (str(tree), tuple((sql, tuple(v) if isinstance(v, list) else v) for sql, v in bounds), search)
    total = reads.totals.get(selection)
    if total is None:
        total = await _count_members(conn, tree, bounds, search, where, args)
        if reads.generation == generation:
            reads.totals.put(selection, total)
    rows = await _members_page(conn, options, where, args, reads, (selection, generation))
    return {"members": [project(member_json(r), options.fields) for r in rows], "meta": options.pagination(total)}


# The members with one label, counted from the labels' index alone (each member has a label once;
# several labels' members are counted each once): what `label:x` (or `label:[x,y]`) selects, as
# every members_labels row names an existing member.
_LABELLED = """
SELECT count(*) FROM members_labels ml JOIN labels l ON l.id = ml.label_id WHERE l.slug = $1"""
_LABELLED_ANY = """
SELECT count(DISTINCT ml.member_id) FROM members_labels ml JOIN labels l ON l.id = ml.label_id
WHERE l.slug = ANY($1::text[])"""


async def _count_members(conn, tree: Node, bounds: list, search: str | None, where: str, args: list[Any]) -> int:
    """The filter's total: a filter of labels alone counted from the labels' side."""
    labels = _labels_alone(tree) if not bounds and not search else None
    if labels is None:
        return await conn.fetchval(f"SELECT count(*) FROM members m {where}", *args)
    return await (conn.fetchval(_LABELLED, labels[0]) if len(labels) == 1 else conn.fetchval(_LABELLED_ANY, labels))


def _labels_alone(tree: Node) -> list[str] | None:
    """The slugs of a filter that is one `label:` term (any of them), else None."""
    return list(tree.values) if isinstance(tree, Term) and tree.key == "label" and not tree.negated else None


async def _members_page(conn, options: Browse, where: str, args: list[Any], reads: MemberReads, seen) -> list:
    """The page's rows, chosen first and their labels, newsletters and tiers read for them alone.
    In created_at order, a page whose first row a recent answer saw (this page asked again, or the
    one after the page before) is read from that row by the index rather than by OFFSET."""
    order = _order_sql(options)
    way = _created_at_way(options)
    if way is None:
        chosen = f"SELECT m.* FROM members m {where} {order} {_page_sql(options, len(args))}"
        return await conn.fetch(MEMBER_QUERY.replace("FROM members m", f"FROM ({chosen}) m") + f" {order}", *args,
                                *_page_values(options))
    selection, generation = seen
    assert options.limit is not None
    starts = (selection, way, options.limit)
    start = reads.page_starts.get((*starts, options.page))
    bound, values = "", [options.limit + 1, options.offset]
    if start is not None:  # from that row on: created_at the index's bound, the id breaking ties (1 DESC)
        n = len(args)
        bound = (f" AND m.created_at {way}= ${n + 3} AND (m.created_at {way} ${n + 3} OR m.id <= ${n + 4})")
        values = [options.limit + 1, 0, *start]
    chosen = f"SELECT m.* FROM members m {where}{bound} {order} {_page_sql(options, len(args))}"
    rows = await conn.fetch(MEMBER_QUERY.replace("FROM members m", f"FROM ({chosen}) m") + f" {order}", *args,
                            *values)
    if reads.generation == generation:
        for page, row in ((options.page, rows[:1]), (options.page + 1, rows[options.limit:])):
            if row:
                reads.page_starts.put((*starts, page), (row[0]["created_at"], row[0]["id"]))
    return rows[:options.limit]


def _created_at_way(options: Browse) -> str | None:
    """`<` for created_at desc, `>` for asc (ties by id descending, as _order_sql ends); None for
    any other order or for `limit=all`."""
    if options.limit is None or [column for column, _ in options.order] != ["m.created_at"]:
        return None
    return "<" if options.order[0][1] == "DESC" else ">"


async def read_member(conn, member_id: str) -> dict:
    row = await conn.fetchrow(f"{MEMBER_QUERY} WHERE m.id = $1", member_id)
    if row is None:
        raise not_found("member")
    return {"members": [member_json(row)]}


def label_names(labels: Any) -> list[str]:
    """Labels as the reference takes them (names, or objects with a name or slug) as the names they
    are found or made by (pressroom/store/labels.py: a slug finds its label too)."""
    if not isinstance(labels, list):
        raise invalid("labels must be a list", property="labels")
    names = []
    for label in labels:
        if isinstance(label, str):
            names.append(label)
        elif isinstance(label, dict) and isinstance(label.get("name") or label.get("slug"), str):
            names.append(label.get("name") or label["slug"])
        else:
            raise invalid("each label is a name or an object with a name or slug", property="labels")
    return names


def newsletter_refs(newsletters: Any) -> list[str]:
    if not isinstance(newsletters, list) or not all(
            isinstance(n, dict) and isinstance(n.get("id") or n.get("slug"), str) for n in newsletters):
        raise invalid("newsletters must be a list of objects with an id or a slug", property="newsletters")
    return [n.get("id") or n["slug"] for n in newsletters]


def member_status(item: dict, current: str | None, tiers: bool) -> members.Membership:
    """The member's status by the rule the import follows too (operations.members.membership):
    `comped: true` makes a member comped, `comped: false` makes a comped one free again, a tier
    makes a member paid."""
    status, comped = item.get("status"), item.get("comped")
    if status not in (None, "free", "paid", "comped"):
        raise invalid("status must be free, paid or comped", property="status")
    if comped is not None and not isinstance(comped, bool):
        raise invalid("comped must be true or false", property="comped")
    try:
        return members.membership(status=status, comped=comped, tiers=tiers, current=current)
    except BadInput as error:
        raise invalid(str(error), property="tiers") from None


def welcome_asked(query) -> bool:
    """The reference's options of an added member's email (`send_email`, `email_type`), as its client
    sends them in the query: none unless asked; the one Pressroom sends is the signup's, the welcome."""
    send = (query.get("send_email") or "false").lower()
    if send not in ("true", "false"):
        raise invalid("send_email must be true or false", property="send_email")
    kind = query.get("email_type") or "signup"
    if kind not in ("signin", "signup", "subscribe"):
        raise invalid("email_type must be signin, signup or subscribe", property="email_type")
    if send == "true" and kind != "signup":
        raise invalid(f"email_type {kind} is not sent by Pressroom: the email a member added is sent is the welcome "
                      "email (email_type signup)", property="email_type")
    return send == "true"


async def add_member(conn, item: dict, settings: Settings, *, welcome: bool = False) -> str:
    _unsupported_fields(item, _MEMBER_WRITABLE, "members")
    email = text_of(item, "email")
    if not email:
        raise invalid("members.email is required", property="email")
    newsletters = newsletter_refs(item["newsletters"]) if "newsletters" in item else None
    if item.get("subscribed") is False and newsletters is None:
        newsletters = []
    tiers = await _tier_slugs(conn, item.get("tiers") or [])
    added = await members.add_member(email, text_of(item, "name"),
                                     status=member_status(item, None, bool(tiers)).status or "free",
                                     labels=label_names(item.get("labels") or []), tiers=tiers,
                                     note=text_of(item, "note"), newsletters=newsletters, welcome=welcome,
                                     settings=settings)
    return added.member_id


async def edit_member(conn, member_id: str, item: dict, settings: Settings) -> None:
    _unsupported_fields(item, _MEMBER_WRITABLE, "members")
    row = await conn.fetchrow(f"{MEMBER_QUERY} WHERE m.id = $1", member_id)
    if row is None:
        raise not_found("member")
    if "email" in item and item["email"] != row["email"]:
        raise invalid("changing a member's email is not supported by Pressroom", property="email")
    had_labels = {label["slug"] for label in json.loads(row["labels"])}
    had_newsletters = {n["id"] for n in json.loads(row["newsletters"])}
    given: dict[str, str] = {}  # slug on the site (or to be made with): name given
    if "labels" in item:
        try:
            pairs = label_pairs(label_names(item["labels"]))
        except BadInput as error:
            raise invalid(str(error), property="labels") from None
        given = dict(zip(await labels_store.slugs_of(conn, pairs), (name for name, _ in pairs), strict=True))
    labels = set(given) if "labels" in item else had_labels
    joining, leaving = [], []
    if "newsletters" in item or item.get("subscribed") is False:
        wanted = newsletter_refs(item.get("newsletters") or [])
        ids = {r["id"] for r in await conn.fetch(
            "SELECT id FROM newsletters WHERE id = ANY($1) OR slug = ANY($1)", wanted)}
        if len(ids) < len(set(wanted)):
            raise not_found("newsletter")
        joining, leaving = sorted(ids - had_newsletters), sorted(had_newsletters - ids)
    had_tiers = sorted(t["slug"] for t in json.loads(row["tiers"]))
    if "tiers" in item and sorted(await _tier_slugs(conn, item["tiers"] or [])) != had_tiers:
        raise invalid("changing a member's tiers through members.edit is not supported by Pressroom", property="tiers",
                      context="a member's tiers are given when they are added (members.add, members import)")
    name = text_of(item, "name") if "name" in item else None
    status = member_status(item, row["status"], bool(had_tiers)).status
    note = text_of(item, "note") if "note" in item else None
    if name is None and status is None and note is None and not (joining or leaving or labels ^ had_labels):
        return
    await members.update_member(member_id, name=("" if "name" in item and name is None else name), status=status,
                                newsletters=joining, no_newsletters=leaving,
                                labels=[given[slug] for slug in sorted(labels - had_labels)],
                                no_labels=sorted(had_labels - labels),
                                note=("" if "note" in item and note is None else note), settings=settings)


# --- tiers and labels ----------------------------------------------------------------------------

TIER_FIELDS = ("id", "name", "slug", "type", "active", "visibility", "description", "created_at", "updated_at")
LABEL_FIELDS = ("id", "name", "slug", "created_at", "updated_at")


def tier_json(row) -> dict:
    return {"id": row["id"], "name": row["name"], "slug": row["slug"], "type": row["type"], "active": row["active"],
            "visibility": "public", "description": None, "welcome_page_url": None, "monthly_price": None,
            "yearly_price": None, "currency": None, "benefits": [], "trial_days": 0,
            "created_at": iso(row["created_at"]), "updated_at": iso(row["updated_at"])}


_TIER_WRITABLE = {"name", "slug", "type"}
# What every tier is here: sent with these values (as read back), there is nothing to keep.
_TIER_AS_KEPT = {"active": True, "visibility": "public"}


def tier_fields(item: dict) -> dict[str, str | None]:
    """A new tier's name, slug and type; a price, a currency or any field Pressroom does not keep,
    sent with a value, refused by name (a tier here has no price: Pressroom takes no payments)."""
    _unsupported_fields({k: v for k, v in item.items() if k not in _TIER_AS_KEPT or _TIER_AS_KEPT[k] != v},
                        _TIER_WRITABLE, "tiers")
    return {"name": text_of(item, "name") or "", "slug": text_of(item, "slug"), "type": text_of(item, "type") or "paid"}


def label_json(row) -> dict:
    return {"id": row["id"], "name": row["name"], "slug": row["slug"], "created_at": iso(row["created_at"]),
            "updated_at": iso(row["updated_at"])}


async def browse_simple(conn, query, table: str, resource: str, to_json, known: tuple[str, ...]) -> dict:
    orderable = {"created_at": "created_at", "name": "name", "slug": "slug", "id": "id"}
    options = browse_options(query, orderable=orderable, default_order="created_at asc", includes=(),
                             known_fields=known)
    columns = {"id": "id", "slug": "slug", "name": "name", **({"type": "type", "active": "active"}
                                                            if table == "products" else {})}
    where, values = simple_filter(options.filter, columns, 1)
    total = await conn.fetchval(f"SELECT count(*) FROM {table} p WHERE {where}", *values)
    rows = await conn.fetch(f"SELECT * FROM {table} p WHERE {where} {_order_sql(options)} "
                            f"{_page_sql(options, len(values))}", *values, *_page_values(options))
    return {resource: [project(to_json(r), options.fields) for r in rows], "meta": options.pagination(total)}


# --- emails --------------------------------------------------------------------------------------

def email_json(row) -> dict:
    return {"id": row["id"], "uuid": str(row["uuid"]), "post_id": row["post_id"],
            "newsletter_id": row["newsletter_id"], "status": row["status"], "recipient_filter": row["recipient_filter"],
            "error": row["error"], "error_data": row["error_data"], "email_count": row["email_count"],
            "delivered_count": row["delivered_count"], "opened_count": row["opened_count"],
            "failed_count": row["failed_count"], "subject": row["subject"], "track_opens": row["track_opens"],
            "submitted_at": iso(row["submitted_at"]), "created_at": iso(row["created_at"]),
            "updated_at": iso(row["updated_at"])}


async def read_email(conn, email_id: str) -> dict:
    row = await conn.fetchrow("SELECT * FROM emails WHERE id = $1", email_id)
    if row is None:
        raise not_found("email")
    return {"emails": [email_json(row)]}

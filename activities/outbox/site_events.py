"""The site's events for integrations' webhooks, written to the outbox in the change's transaction.

One entry per (event, webhook) subscribed to it, so each target is delivered, retried and recorded
on its own. The entry holds the body as the reference platform sends it: the post or member as
its Admin API shows it, `current` and `previous` (the changed fields' values before; for a
deletion, the whole resource, `current` empty). A change no webhook subscribes to costs one
indexed look-up and writes nothing.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import asyncpg

from activities.outbox.models import SITE_EVENTS
from pressroom.store.outbox import enqueue_many

_TIME = """to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')"""

# Members as the Admin API reads them (with labels, tiers and newsletters).
_MEMBERS = f"""
SELECT m.id, json_build_object(
  'id', m.id, 'uuid', m.uuid, 'email', m.email, 'name', m.name, 'note', m.note, 'geolocation', NULL,
  'subscribed', EXISTS (SELECT 1 FROM members_newsletters mn WHERE mn.member_id = m.id),
  'created_at', {_TIME.format('m.created_at')}, 'updated_at', {_TIME.format('m.updated_at')},
  'labels', coalesce((SELECT json_agg(json_build_object('id', l.id, 'name', l.name, 'slug', l.slug,
                        'created_at', {_TIME.format('l.created_at')}, 'updated_at', {_TIME.format('l.updated_at')})
                        ORDER BY ml.sort_order, l.slug)
                      FROM members_labels ml JOIN labels l ON l.id = ml.label_id WHERE ml.member_id = m.id), '[]'),
  'subscriptions', '[]'::json, 'avatar_image', NULL, 'comped', m.status = 'comped',
  'email_count', m.email_count, 'email_opened_count', m.email_opened_count, 'email_open_rate', m.email_open_rate,
  'status', m.status, 'last_seen_at', NULL,
  'tiers', coalesce((SELECT json_agg(json_build_object('id', p.id, 'name', p.name, 'slug', p.slug, 'type', p.type,
                       'active', p.active, 'expiry_at', {_TIME.format('mp.expiry_at')}) ORDER BY mp.sort_order, p.slug)
                     FROM members_products mp JOIN products p ON p.id = mp.product_id WHERE mp.member_id = m.id), '[]'),
  'email_suppression', json_build_object('suppressed', m.email_disabled, 'info', NULL),
  'newsletters', coalesce((SELECT json_agg(json_build_object('id', n.id, 'name', n.name, 'description', NULL,
                             'status', n.status) ORDER BY n.name, n.id)
                           FROM members_newsletters mn JOIN newsletters n ON n.id = mn.newsletter_id
                           WHERE mn.member_id = m.id), '[]')
)::text AS resource
FROM members m WHERE m.id = ANY($1::text[])"""

# Posts as the Admin API reads them with formats html and plaintext (tags and authors: Pressroom keeps none).
_POSTS = f"""
SELECT p.id, json_build_object(
  'id', p.id, 'uuid', p.uuid, 'title', p.title, 'slug', p.slug, 'html', p.html, 'plaintext', p.plaintext,
  'status', p.status, 'visibility', p.visibility,
  'created_at', {_TIME.format('p.created_at')}, 'updated_at', {_TIME.format('p.updated_at')},
  'published_at', {_TIME.format('p.published_at')},
  'excerpt', left(p.plaintext, 500), 'url', $2::text || '/' || p.slug || '/',
  'email_segment', p.email_recipient_filter,
  'newsletter', (SELECT json_build_object('id', n.id, 'name', n.name, 'slug', n.slug, 'status', n.status)
                 FROM newsletters n WHERE n.id = p.newsletter_id),
  'tags', '[]'::json, 'authors', '[]'::json
)::text AS resource
FROM posts p WHERE p.id = ANY($1::text[])"""

_SUBSCRIBERS = "SELECT id FROM webhooks WHERE event = ANY($1::text[]) ORDER BY created_at, id"


def resource_of(event: str) -> str:
    """The resource an event is about: `member` for member.added, `post` for post.published.edited."""
    return event.split(".", 1)[0]


async def subscribed(conn: asyncpg.Connection, *events: str) -> bool:
    """Does any webhook subscribe to one of these events? One indexed look-up."""
    return await conn.fetchval("SELECT EXISTS (SELECT 1 FROM webhooks WHERE event = ANY($1::text[]))",
                               list(events))


async def resources(conn: asyncpg.Connection, resource: str, ids: list[str],
                    site_url: str = "") -> dict[str, dict[str, Any]]:
    """Members or posts as the Admin API shows them, by id (in the caller's transaction)."""
    if resource == "member":
        rows = await conn.fetch(_MEMBERS, ids)
    else:
        rows = await conn.fetch(_POSTS, ids, site_url.rstrip("/"))
    return {row["id"]: json.loads(row["resource"]) for row in rows}


async def before(conn: asyncpg.Connection, events: tuple[str, ...] | str, ids: list[str] | str,
                 site_url: str = "") -> dict[str, dict[str, Any]] | None:
    """The resources as they are before a change that may emit one of `events`; None (nothing read)
    when no webhook subscribes to any of them."""
    events = (events,) if isinstance(events, str) else events
    if not await subscribed(conn, *events):
        return None
    return await resources(conn, resource_of(events[0]), [ids] if isinstance(ids, str) else ids, site_url)


def changed_fields(previous: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """`previous` as the reference gives it: the fields that changed, with their values before."""
    return {key: value for key, value in previous.items() if current.get(key) != value}


async def emit(conn: asyncpg.Connection, event: str, ids: list[str] | str,
               previous: dict[str, dict[str, Any]] | None = None, *, site_url: str = "") -> int:
    """Write `event` for each resource id to every webhook subscribed to it, in the caller's open
    transaction; returns how many entries were written.

    `previous`: the resources before the change (from `before`); for a deletion, emit before the
    row goes: the resource as it is becomes `previous` and `current` is empty.
    """
    ids = [ids] if isinstance(ids, str) else ids
    if event not in SITE_EVENTS:
        raise ValueError(f"{event!r} is not a site event")
    if not ids:
        return 0
    webhooks = [row["id"] for row in await conn.fetch(_SUBSCRIBERS, [event])]
    if not webhooks:
        return 0
    resource = resource_of(event)
    now = await resources(conn, resource, ids, site_url)
    entries = []
    for resource_id in ids:
        if resource_id not in now:
            continue
        if event.endswith(".deleted"):
            body = {resource: {"current": {}, "previous": now[resource_id]}}
        else:
            earlier = (previous or {}).get(resource_id)
            body = {resource: {"current": now[resource_id],
                               "previous": changed_fields(earlier, now[resource_id]) if earlier else {}}}
        occurrence = uuid.uuid4().hex
        for webhook_id in webhooks:
            entries.append(({"event": event, "webhook_id": webhook_id, f"{resource}_id": resource_id, "body": body},
                            f"site-event-{occurrence}-{webhook_id}"))
    return await enqueue_many(conn, event, entries)


SCHEDULE_EVENTS = ("post.scheduled", "post.unscheduled", "post.rescheduled")


async def emit_schedule_change(conn: asyncpg.Connection, post_id: str, was: asyncpg.Record, publish_at: Any,
                               previous: dict[str, dict[str, Any]] | None, site_url: str) -> int:
    """A post scheduled (from a draft), rescheduled (to another time) or unscheduled (back to draft):
    its event, as the reference names it; none when nothing changed."""
    if publish_at is None:
        event = "post.unscheduled"
    elif was["status"] != "scheduled":
        event = "post.scheduled"
    elif was["published_at"] != publish_at:
        event = "post.rescheduled"
    else:
        return 0
    return await emit(conn, event, post_id, previous, site_url=site_url)

"""The site's webhooks (an integration's subscriptions to the site's events): create, edit, delete,
list, and the record of their attempts. The CLI (`pressroom integrations webhooks`) and the Admin
API's `webhooks` resource call these; each checks its input once and writes nothing on a refusal.

Not to be confused with operations/webhooks.py: the email provider's events pushed to Pressroom.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from activities.outbox.models import SITE_EVENTS
from activities.outbox.site_webhook import delivered_stub
from pressroom import database
from pressroom.errors import BadInput, NotFound
from pressroom.inputs import entity_id, free_text
from pressroom.settings import Settings, get_settings
from pressroom.target_urls import check_target_url

if TYPE_CHECKING:
    import asyncpg

SECRET_LIMIT = 191  # the reference's column


class Webhook(BaseModel):
    """A webhook as the operator and the Admin API read it (the secret is never shown, only whether one is set)."""
    id: str
    event: str
    target_url: str
    name: str | None
    has_secret: bool
    api_version: str
    integration_id: str
    last_triggered_at: datetime | None
    last_triggered_status: str | None
    last_triggered_error: str | None
    created_at: datetime
    updated_at: datetime


class WebhookAttempt(BaseModel):
    """One attempt at a webhook: its answer's status code, or the error in Pressroom's words."""
    id: int
    webhook_id: str
    outbox_id: str
    event: str
    attempt: int
    status_code: int | None
    outcome: str  # delivered, retried, refused (for good), gone (410: the webhook was removed)
    error: str | None
    answer: str | None = None  # the target's answer when not delivered (its first 300 characters)
    duration_ms: int
    attempted_at: datetime


_COLUMNS = ("id, event, target_url, name, secret IS NOT NULL AND secret <> '' AS has_secret, api_version, "
            "integration_id, last_triggered_at, last_triggered_status, last_triggered_error, created_at, updated_at")


def _event(event: str) -> str:
    if event not in SITE_EVENTS:
        raise BadInput(f"event {free_text(event, 'event', 60)!r} is not one of the site's events: "
                       f"{', '.join(SITE_EVENTS)}")
    return event


def _secret(secret: str | None) -> str | None:
    if secret is None or secret == "":
        return None
    if len(secret) > SECRET_LIMIT or not secret.isprintable():
        raise BadInput(f"the secret must be at most {SECRET_LIMIT} printable characters")
    return secret


async def create_webhook(event: str, target_url: str, integration: str, *, name: str | None = None,
                         secret: str | None = None, api_version: str = "v5",
                         settings: Settings | None = None, pool: asyncpg.Pool | None = None) -> Webhook:
    """A webhook of the integration (its id or slug) for one of the site's events."""
    settings = settings or get_settings()
    event, url = _event(event), check_target_url(target_url, settings)
    name, secret = free_text(name, "name", 191), _secret(secret)
    entity_id(integration, "integration")
    api_version = _api_version(api_version)
    async with database.connection(settings.require_database(), pool) as conn:
        integration_id = await conn.fetchval("SELECT id FROM integrations WHERE id = $1 OR slug = $1", integration)
        if integration_id is None:
            raise NotFound(f"no integration {integration} (by id or slug)")
        row = await conn.fetchrow(
            f"INSERT INTO webhooks (event, target_url, name, secret, api_version, integration_id) "
            f"VALUES ($1, $2, $3, $4, $5, $6) RETURNING {_COLUMNS}", event, url, name, secret, api_version,
            integration_id)
    return Webhook(**dict(row))


def _api_version(version: str) -> str:
    if not isinstance(version, str) or not version.startswith("v") or not version[1:].replace(".", "").isdigit() \
            or len(version) > 10:
        raise BadInput("api_version must read like v5 or v5.0")
    return version


async def edit_webhook(webhook_id: str, *, event: str | None = None, target_url: str | None = None,
                       name: str | None = None, secret: str | None = None, api_version: str | None = None,
                       settings: Settings | None = None, pool: asyncpg.Pool | None = None) -> Webhook:
    """Change what is given (None leaves it); the same checks as `create_webhook`."""
    settings = settings or get_settings()
    entity_id(webhook_id, "webhook")
    event = _event(event) if event is not None else None
    url = check_target_url(target_url, settings) if target_url is not None else None
    new_name = free_text(name, "name", 191) if name is not None else None
    new_secret = _secret(secret) if secret is not None else None
    version = _api_version(api_version) if api_version is not None else None
    async with database.connection(settings.require_database(), pool) as conn:
        row = await conn.fetchrow(
            f"UPDATE webhooks SET event = coalesce($2, event), target_url = coalesce($3, target_url), "
            f"name = CASE WHEN $4 THEN $5 ELSE name END, secret = CASE WHEN $6 THEN $7 ELSE secret END, "
            f"api_version = coalesce($8, api_version), updated_at = now() WHERE id = $1 RETURNING {_COLUMNS}",
            webhook_id, event, url, name is not None, new_name, secret is not None, new_secret, version)
    if row is None:
        raise NotFound(f"webhook {webhook_id} does not exist")
    return Webhook(**dict(row))


async def delete_webhook(webhook_id: str, *, settings: Settings | None = None,
                         pool: asyncpg.Pool | None = None) -> int:
    """The webhook goes; its entries not yet delivered are skipped, their bodies cleared. Returns how many."""
    settings = settings or get_settings()
    entity_id(webhook_id, "webhook")
    async with database.connection(settings.require_database(), pool) as conn, conn.transaction():
        if await conn.fetchval("DELETE FROM webhooks WHERE id = $1 RETURNING id", webhook_id) is None:
            raise NotFound(f"webhook {webhook_id} does not exist")
        rows = await conn.fetch("SELECT id, payload::text FROM outbox WHERE webhook_id = $1 "
                                "AND status IN ('pending', 'failed', 'aborted') FOR UPDATE", webhook_id)
        await conn.executemany(
            "UPDATE outbox SET status = 'skipped', last_error_code = 'WEBHOOK_DELETED', payload = $2::jsonb, "
            "last_error_msg = 'its webhook was removed', processed_at = now(), updated_at = now() WHERE id = $1",
            [(row["id"], json.dumps(delivered_stub(json.loads(row["payload"])))) for row in rows])
    return len(rows)


async def list_webhooks(integration: str | None = None, *, settings: Settings | None = None) -> list[Webhook]:
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        rows = await conn.fetch(
            f"SELECT {_COLUMNS} FROM webhooks WHERE $1::text IS NULL OR integration_id = "
            "(SELECT id FROM integrations WHERE id = $1 OR slug = $1) ORDER BY created_at, id", integration)
    return [Webhook(**dict(row)) for row in rows]


async def webhook_attempts(*, failed: bool = False, webhook: str | None = None, limit: int = 50,
                           settings: Settings | None = None) -> list[WebhookAttempt]:
    """The latest attempts, newest first; `failed`: only those not delivered."""
    settings = settings or get_settings()
    if webhook is not None:
        entity_id(webhook, "webhook")
    if not 1 <= limit <= 1000:
        raise BadInput("--limit must be between 1 and 1000")
    async with database.connection(settings.require_database()) as conn:
        rows = await conn.fetch(
            "SELECT id, webhook_id, outbox_id, event, attempt, status_code, outcome, error, answer, duration_ms, "
            "attempted_at "
            "FROM webhook_attempts WHERE (NOT $1 OR outcome <> 'delivered') AND ($2::text IS NULL OR webhook_id = $2) "
            "ORDER BY attempted_at DESC, id DESC LIMIT $3", failed, webhook, limit)
    return [WebhookAttempt(**dict(row)) for row in rows]


async def outbox_by_webhook(conn: Any) -> dict[str, Any]:
    """`outbox status`'s counts of the site's events: by event type and by webhook, each by state."""
    by_event: dict[str, dict[str, int]] = {}
    for row in await conn.fetch("SELECT event_type, status, count(*) AS n FROM outbox WHERE webhook_id IS NOT NULL "
                                "GROUP BY 1, 2 ORDER BY 1, 2"):
        by_event.setdefault(row["event_type"], {})[row["status"]] = row["n"]
    by_webhook: dict[str, dict[str, int]] = {}
    for row in await conn.fetch("SELECT webhook_id, status, count(*) AS n FROM outbox WHERE webhook_id IS NOT NULL "
                                "GROUP BY 1, 2 ORDER BY 1, 2"):
        by_webhook.setdefault(row["webhook_id"], {})[row["status"]] = row["n"]
    return {"by_event": by_event, "by_webhook": by_webhook}

"""Integrations and their Admin API keys, in the reference platform's tables (`integrations`, `api_keys`).

A key is `{id}:{secret}`: 24 and 64 hex characters. The id is the token's `kid`; the secret, hex
decoded, signs it (frontdoor/admin_api/auth.py). The secret is shown once, when the integration is
made; lists show the id only.
"""

from __future__ import annotations

import secrets
from datetime import datetime

from pydantic import BaseModel

from operations.authoring import slug_of
from pressroom import database
from pressroom.errors import BadInput, NotFound
from pressroom.inputs import free_text
from pressroom.settings import Settings, get_settings


class IntegrationAdded(BaseModel):
    name: str
    slug: str  # what `integrations webhooks add --integration` takes
    admin_api_key: str  # id:secret


class Integration(BaseModel):
    id: str
    name: str
    slug: str
    key_id: str | None
    created_at: datetime


async def add_integration(name: str, *, settings: Settings | None = None) -> IntegrationAdded:
    """A custom integration and its admin key, in one transaction; a name in use is refused."""
    checked = free_text(name, "integration name")
    if checked is None:
        raise BadInput("an integration needs a name")
    key_id, secret = secrets.token_hex(12), secrets.token_hex(32)
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn, conn.transaction():
        if await conn.fetchval("SELECT EXISTS (SELECT 1 FROM integrations WHERE lower(name) = lower($1))", checked):
            raise BadInput(f"an integration named {checked!r} already exists")
        base = slug_of(checked)
        taken = {r["slug"] for r in await conn.fetch(
            "SELECT slug FROM integrations WHERE slug = $1 OR slug LIKE $1 || '-%'", base)}
        slug = next(s for s in [base, *(f"{base}-{n}" for n in range(2, len(taken) + 3))] if s not in taken)
        integration_id = await conn.fetchval("INSERT INTO integrations (name, slug) VALUES ($1, $2) RETURNING id",
                                             checked, slug)
        await conn.execute("INSERT INTO api_keys (id, type, secret, integration_id) VALUES ($1, 'admin', $2, $3)",
                           key_id, secret, integration_id)
    return IntegrationAdded(name=checked, slug=slug, admin_api_key=f"{key_id}:{secret}")


async def list_integrations(*, settings: Settings | None = None) -> list[Integration]:
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        rows = await conn.fetch(
            "SELECT i.id, i.name, i.slug, k.id AS key_id, i.created_at FROM integrations i "
            "LEFT JOIN api_keys k ON k.integration_id = i.id AND k.type = 'admin' ORDER BY i.created_at, i.id")
    return [Integration(**dict(r)) for r in rows]


async def remove_integration(name: str, *, settings: Settings | None = None) -> str:
    """The integration (by name or slug) and its keys: tokens signed with them stop working at once."""
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        removed = await conn.fetchval(
            "DELETE FROM integrations WHERE id = (SELECT id FROM integrations WHERE lower(name) = lower($1) "
            "OR slug = $1 ORDER BY created_at LIMIT 1) RETURNING id", name.strip())
    if removed is None:
        raise NotFound(f"no integration is named {name.strip()[:80]!r}")
    return removed

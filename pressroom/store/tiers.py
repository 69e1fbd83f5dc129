"""The site's tiers (the reference's `products`): the one a complimentary member is given when no
tier is named."""

from __future__ import annotations

import asyncpg

# The reference's default tier: its first active paid tier.
DEFAULT_TIER = "SELECT id FROM products WHERE type = 'paid' AND active ORDER BY created_at, id LIMIT 1"


async def default_tier(conn: asyncpg.Connection) -> str | None:
    """The site's default tier's id; None when it has no active paid tier."""
    return await conn.fetchval(DEFAULT_TIER)

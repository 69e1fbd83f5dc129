"""The provider's limits, client side: what each sending domain learned and used, and a reset."""

from __future__ import annotations

from activities.sending_limits import describe_limits, reset_learned_limit
from pressroom.errors import NotFound
from pressroom.settings import Settings, get_settings


async def sending_limits(settings: Settings | None = None) -> list[dict]:
    from pressroom import database

    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        return await describe_limits(conn, settings)


async def reset_sending_limit(domain: str, settings: Settings | None = None) -> None:
    from pressroom import database

    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        if not await reset_learned_limit(conn, domain):
            raise NotFound(f"no batch size was learned for domain {domain}")

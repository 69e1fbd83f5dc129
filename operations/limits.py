"""The provider's limits, client side: what each sending domain learned and used, and a reset."""

from __future__ import annotations

from activities.sending_limits import describe_limits, reset_learned_limit
from pressroom.errors import NotFound
from pressroom.providers.port import AccountQuota
from pressroom.settings import ConfigurationError, Settings, get_settings


async def sending_limits(settings: Settings | None = None) -> list[dict]:
    """Per sending domain; the caps are the configured ones or the account's stated quota (SES), the smaller."""
    from pressroom import database
    from pressroom.providers.wiring import provider_from_settings

    settings = settings or get_settings()
    try:
        provider = provider_from_settings(settings)
    except ConfigurationError:  # no provider credentials here: the configured caps are what is known
        quota = AccountQuota()
    else:
        try:
            quota = await provider.account_quota()
        finally:
            await provider.aclose()
    async with database.connection(settings.require_database()) as conn:
        return await describe_limits(conn, settings, quota=quota)


async def reset_sending_limit(domain: str, settings: Settings | None = None) -> None:
    from pressroom import database

    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        if not await reset_learned_limit(conn, domain):
            raise NotFound(f"no batch size was learned for domain {domain}")

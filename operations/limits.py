"""The provider's limits, client side: what each sending domain learned and used, and a reset."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from activities.sending_limits import send_caps, sending_domain
from pressroom import database
from pressroom.errors import NotFound
from pressroom.providers.port import AccountQuota
from pressroom.providers.wiring import provider_from_settings, sending_scope
from pressroom.settings import ConfigurationError, Settings, get_settings

if TYPE_CHECKING:
    import asyncpg


async def sending_limits(settings: Settings | None = None) -> list[dict]:
    """Per sending domain; the caps are the configured ones or the account's stated quota (SES), the smaller."""
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
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        if not await reset_learned_limit(conn, domain):
            raise NotFound(f"no batch size was learned for domain {domain}")

async def describe_limits(conn: asyncpg.Connection, settings: Settings, now: datetime | None = None,
                          quota: AccountQuota | None = None) -> list[dict]:
    """Per sending domain: the learned batch size, the caps and what they used this hour and today."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    domains = [sending_scope(settings)] + ([settings.fallback_domain] if settings.fallback_domain else [])
    learned = {row["domain"]: dict(row) for row in await conn.fetch(
        "SELECT domain, batch_size, refused_size, reason, refused_at FROM sending_domain_limits ORDER BY domain")}
    # Sent is what the provider accepted: the recipients of batches submitted this hour and today
    # (the caps' reservations exist only while caps are set, so they cannot say it).
    sent = await conn.fetch(
        """SELECT b.fallback_sending_domain AS fallback, count(*) FILTER (WHERE b.updated_at >= $1) AS hour,
                  count(*) AS day
           FROM email_batches b JOIN email_recipients r ON r.batch_id = b.id
           WHERE b.status = 'submitted' AND b.updated_at >= $2 GROUP BY 1""",
        now.replace(minute=0, second=0, microsecond=0), now.replace(hour=0, minute=0, second=0, microsecond=0))
    used: dict[str, dict[str, int]] = {}
    for row in sent:  # without a fallback domain configured, fallback batches went through the main one
        counts = used.setdefault(sending_domain(settings, row["fallback"]), {"hour": 0, "day": 0})
        counts["hour"] += row["hour"]
        counts["day"] += row["day"]
    out = []
    for domain in dict.fromkeys([d for d in domains if d] + list(learned)):
        row = learned.get(domain, {})
        caps = send_caps(settings, domain, quota or AccountQuota())
        out.append({"domain": domain, "batch_size": row.get("batch_size"), "refused_size": row.get("refused_size"),
                    "refused_at": row.get("refused_at"), "reason": row.get("reason"),
                    "hourly_limit": caps["hour"], "daily_limit": caps["day"],
                    "sent_this_hour": used[domain]["hour"] if domain in used else 0,
                    "sent_today": used[domain]["day"] if domain in used else 0,
                    # The provider's own count for the whole account (SES: SentLast24Hours) against its
                    # rolling day's quota, when it states them: what admission reads.
                    "account_daily_limit": (quota or AccountQuota()).per_day,
                    "account_sent_last_24_hours": (quota or AccountQuota()).sent_last_24_hours})
    return out


async def reset_learned_limit(conn: asyncpg.Connection, domain: str) -> bool:
    """Forget the batch size learned for a domain (its account left probation); True if there was one."""
    return await conn.fetchval("DELETE FROM sending_domain_limits WHERE domain = $1 RETURNING true", domain) or False

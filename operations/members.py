"""Members: adding one commits the member and its welcome email's outbox entry together."""

from __future__ import annotations

from dataclasses import dataclass

from pressroom import tracing
from pressroom.errors import BadInput
from pressroom.settings import Settings, get_settings


@dataclass(frozen=True)
class MemberAdded:
    member_id: str
    welcome_key: str | None  # the outbox entry of the welcome email, when one was enqueued


@tracing.traced("pressroom members add")
async def add_member(email: str, name: str | None = None, *, status: str = "free",
                     settings: Settings | None = None) -> MemberAdded:
    """The member and its MemberCreatedEvent in one transaction: both commit, or neither."""
    import asyncpg

    from activities.outbox import WELCOME_EMAIL_SLUGS, enqueue
    from pressroom import database

    if status not in WELCOME_EMAIL_SLUGS:
        raise BadInput(f"member status {status!r} is not one of {', '.join(WELCOME_EMAIL_SLUGS)}")
    from pressroom.inputs import email_address, free_text

    email, name = email_address(email), free_text(name, "name")
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        async with conn.transaction():
            try:
                member_id = await conn.fetchval(
                    "INSERT INTO members (email, name, status) VALUES ($1, $2, $3) RETURNING id", email, name, status)
            except asyncpg.UniqueViolationError:
                raise BadInput("a member with that address already exists") from None
            tracing.annotate(member_id=member_id)
            await conn.execute("INSERT INTO members_newsletters (member_id, newsletter_id) "
                               "SELECT $1, id FROM newsletters WHERE subscribe_on_signup AND status = 'active'",
                               member_id)
            key = None
            # Every new member is welcomed, with the automated email for their status, when the
            # setting is on (the handler reads it again when it sends).
            if settings.welcome_emails:
                key = await enqueue(conn, "MemberCreatedEvent", {"member_id": member_id},
                                    idempotency_key=f"member-created-{member_id}")
    return MemberAdded(member_id, key)

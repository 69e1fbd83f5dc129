"""What every automated email's send shares (the welcome's, an automation's): its message as sent,
its row in automated_email_recipients, and the reasons it waits or is skipped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from pressroom.email_rendering import ContentError, Rendered, header_text, mailbox, render_automated
from pressroom.settings import Settings


class TemplateWaiting(Exception):
    """The welcome email's template cannot be rendered: the entry waits for it to be fixed (it is
    the site's to fix, and every member queued meanwhile is welcomed once it is), not aborted."""

    code = "WELCOME_TEMPLATE"


def skipped(code: str, why: str) -> dict[str, Any]:
    """A handler's result when there was nothing to send: the entry reads `skipped`, with the code and why."""
    return {"skipped": why, "code": code}


@dataclass(frozen=True)
class WelcomeMessage:
    rendered: Rendered
    from_address: str
    reply_to: str | None


# The outcome of an automated email's latest send to a member; an uncertain one keeps the window's
# start and restarts its wait. One row per email and member: whichever path sends it, once.
RECORD_SEND = """INSERT INTO automated_email_recipients AS r (automated_email_id, member_id, member_uuid, member_email,
                      member_name, provider_id, send_outcome, send_attempts, first_uncertain_at, last_uncertain_at)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8::int, CASE WHEN $7 = 'uncertain' THEN now() END,
                       CASE WHEN $7 = 'uncertain' THEN now() END)
               ON CONFLICT (automated_email_id, member_id) DO UPDATE SET
                   provider_id = coalesce(EXCLUDED.provider_id, r.provider_id), send_outcome = $7,
                   send_attempts = r.send_attempts + $8::int,
                   first_uncertain_at = CASE WHEN $7 <> 'uncertain' THEN r.first_uncertain_at
                                             WHEN r.send_outcome = 'uncertain' THEN r.first_uncertain_at
                                             ELSE now() END,
                   last_uncertain_at = CASE WHEN $7 = 'uncertain' THEN now() ELSE r.last_uncertain_at END"""


async def record_automated_send(pool: asyncpg.Pool, automated_email_id: str, member: asyncpg.Record, outcome: str, *,
                                provider_id: str | None = None,
                                sending: bool = False) -> None:
    await pool.execute(RECORD_SEND, automated_email_id, member["id"], member["uuid"], member["email"], member["name"],
                       provider_id, outcome, 1 if sending else 0)


def welcome_message(welcome: asyncpg.Record, settings: Settings) -> WelcomeMessage:
    """The automated email as sent: its replacements through the newsletter's renderer (a member's
    name is escaped in its HTML), its subject and sender checked as headers; TemplateWaiting otherwise."""
    if not welcome["sender_email"] and not settings.from_address:
        raise TemplateWaiting(f"the automated email {welcome['id']} has no sender and PRESSROOM_FROM_ADDRESS is "
                              "not set; the entry waits and goes out once one is")
    try:
        rendered = render_automated(welcome["id"], welcome["subject"], welcome["html"],
                                    welcome["plaintext"] or welcome["subject"])
        sender = mailbox(None, welcome["sender_email"], "sender", welcome["id"]) if welcome["sender_email"] \
            else settings.from_address
        from_address = mailbox(welcome["sender_name"], sender, "sender", welcome["id"]) \
            if welcome["sender_name"] and welcome["sender_email"] else sender
        reply_to = mailbox(None, welcome["sender_reply_to"], "reply-to", welcome["id"]) \
            if welcome["sender_reply_to"] else None
        header_text(rendered.subject, "subject", welcome["id"])
    except ContentError as error:
        raise TemplateWaiting(f"the automated {error}; the entry waits and goes out once it is fixed") from None
    return WelcomeMessage(rendered, from_address, reply_to)

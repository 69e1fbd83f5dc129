"""The welcome email: MemberCreatedEvent's handler, once per member, an uncertain send looked up first."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from temporalio import activity

from activities.automated_email import (
    WelcomeMessage,
    record_automated_send,
    skipped,
    welcome_message,
)
from activities.automations.entry import WelcomeAutomations
from activities.confirm import StillConfirming, confirm_wait, lookup_window, uncertain_sends_exhausted
from activities.errors import non_retryable
from activities.outbox.models import WELCOME_EMAIL_SLUGS, EntryInput, MemberCreatedEvent
from pressroom.dependencies import Dependencies
from pressroom.email_rendering import member_values
from pressroom.providers.port import ACCEPTED, UNCERTAIN, Message, ProviderError

OUTBOX_MARK = "pressroom-outbox"  # the v: variable that proves which entry a welcome email carried


class WelcomeEmails:
    """Not activities of their own: the delivery's handle_entry runs `send` for a MemberCreatedEvent."""

    def __init__(self, deps: Dependencies) -> None:
        self.pool = deps.pool
        self.provider = deps.provider
        self.settings = deps.settings
        self.automations = WelcomeAutomations(deps)

    async def send(self, event: MemberCreatedEvent, key: str, input: EntryInput) -> dict[str, Any]:
        """The welcome email of the automated email for the member's status; once per member.

        Its row in automated_email_recipients records each send's outcome before the request goes
        out; an uncertain one is looked up by its `pressroom-outbox` mark, on any attempt and after
        a requeue, before it is sent again.
        """
        if not event.welcome:
            # Decided when the member was added (the event commits with them); nothing to send.
            return {"welcome": "not asked"}
        if not self.settings.welcome_emails:
            # Read when the entry is handled, not only when it was queued: an operator who switches
            # welcome emails off stops the ones already queued too. They are not kept waiting (a
            # welcome that arrives days late, in a burst when the switch comes back, helps nobody);
            # they are aborted with this reason, and `pressroom outbox requeue` sends one if wanted.
            raise non_retryable("WELCOME_EMAILS_OFF",
                                "welcome emails are switched off (PRESSROOM_WELCOME_EMAILS=false) "
                                "on the worker that handled this entry; requeue it to send it")
        member = await self.pool.fetchrow("SELECT id, uuid, email, name, status FROM members WHERE id = $1",
                                          event.member_id)
        if member is None:
            return skipped("MEMBER_DELETED", f"member {event.member_id} was deleted before the welcome email")
        entered = None
        if input.automation:  # the welcome automation's first step: this email, then its run goes on
            entered = await self.automations.enter_welcome(member)
            if entered.skipped is not None:
                return entered.skipped
            welcome = entered.email
        else:
            welcome = await self._welcome_email(member)
        if welcome is None:
            return skipped("WELCOME_INACTIVE", f"no active welcome email {WELCOME_EMAIL_SLUGS[member['status']]} "
                                               f"for {member['status']} members")
        result = await self._send_once(member, welcome, key, input)
        if entered is not None and "provider_id" in result:
            await self.automations.welcome_sent(entered, result["provider_id"])
            result["automation_run"] = entered.key
        return result

    async def _send_once(self, member: asyncpg.Record, welcome: asyncpg.Record,
                         key: str, input: EntryInput) -> dict[str, Any]:
        sent = await self.pool.fetchrow(
            "SELECT provider_id, send_outcome, send_attempts, first_uncertain_at, now() AS now, "
            "extract(epoch FROM now() - last_uncertain_at)::float8 AS uncertain_for "
            "FROM automated_email_recipients WHERE automated_email_id = $1 AND member_id = $2",
            welcome["id"], member["id"])
        if sent is not None and sent["provider_id"] is not None:
            return {"provider_id": sent["provider_id"], "already_sent": True}
        message = self._welcome_message(welcome)
        message_id = self.provider.message_id(f"welcome-{hashlib.sha256(key.encode()).hexdigest()[:24]}")
        confirmed = await self._confirm_welcome(member, welcome, sent, message_id, key, input)
        if confirmed is not None:
            return confirmed
        await self._record_welcome(welcome["id"], member, UNCERTAIN, sending=True)  # until the answer says
        try:
            provider_id = await self._send_welcome(member, welcome, message, message_id, key)
        except ProviderError as error:
            await self._record_welcome(welcome["id"], member, error.outcome)
            raise
        await self._record_welcome(welcome["id"], member, ACCEPTED, provider_id=provider_id)
        return {"provider_id": provider_id}

    async def _welcome_email(self, member: asyncpg.Record) -> asyncpg.Record | None:
        """The active automated email for the member's status (comped members get the paid one)."""
        slug = WELCOME_EMAIL_SLUGS[member["status"]]
        if slug != f"member-welcome-email-{member['status']}":
            activity.logger.info("no welcome email of their own for %s members: sending them %s",
                                 member["status"], slug)
        welcome = await self.pool.fetchrow(
            "SELECT id, subject, html, plaintext, sender_name, sender_email, sender_reply_to FROM automated_emails "
            "WHERE slug = $1 AND status = 'active'", slug)
        if welcome is None:
            activity.logger.warning("no active %s: member %s gets no welcome email", slug, member["id"])
        return welcome

    async def _confirm_welcome(self, member: asyncpg.Record, welcome: asyncpg.Record, sent: asyncpg.Record,
                               message_id: str, key: str,
                               input: EntryInput) -> dict[str, Any] | None:
        """An earlier send that may have been accepted is looked up first: found, it is recorded and
        the entry's result returned; not visible yet, the delivery waits (StillConfirming) or, out
        of attempts, fails. None: send it."""
        # A delivery begun by 0.1.0 recorded nothing before sending: its retries look up as it did.
        begun_by_0_1_0 = sent is None and activity.info().attempt > 1
        if not (begun_by_0_1_0 or (sent is not None and sent["send_outcome"] == UNCERTAIN)):
            return None
        begin, end = lookup_window(sent["first_uncertain_at"] if sent else
                                   datetime.now(UTC) - timedelta(days=3),
                                   sent["now"] if sent else datetime.now(UTC))
        provider_id = await self.provider.find_accepted(recipient=member["email"], mark={OUTBOX_MARK: key},
                                                        begin=begin, end=end, message_id=message_id)
        if provider_id is not None:  # an earlier attempt's send was accepted: record it, do not resend
            await self._record_welcome(welcome["id"], member, ACCEPTED, provider_id=provider_id)
            return {"provider_id": provider_id, "confirmed": True}
        if sent is not None:
            wait = confirm_wait(sent["uncertain_for"], self.settings, input.confirm)
            if wait is not None:
                raise StillConfirming(wait)
            if sent["send_attempts"] >= input.max_attempts:
                raise uncertain_sends_exhausted(f"the welcome email of outbox entry {input.outbox_id}",
                                                sent["send_attempts"])
        return None

    async def _record_welcome(self, automated_email_id: str, member: asyncpg.Record, outcome: str, *,
                              provider_id: str | None = None,
                              sending: bool = False) -> None:
        await record_automated_send(self.pool, automated_email_id, member, outcome, provider_id=provider_id,
                                    sending=sending)

    def _welcome_message(self, welcome: asyncpg.Record) -> WelcomeMessage:
        return welcome_message(welcome, self.settings)

    async def _send_welcome(self, member: asyncpg.Record, welcome: asyncpg.Record, message: WelcomeMessage,
                            message_id: str, key: str) -> str:
        rendered = message.rendered
        values = member_values(name=member["name"], email=member["email"], uuid=str(member["uuid"]),
                               status=member["status"], site_url=self.settings.site_url,
                               link_secret=self.settings.require_members_link_secret())
        prepared = self.provider.prepare(Message(
            from_address=message.from_address, subject=rendered.subject, html=rendered.html, text=rendered.text,
            tags=["welcome-email"], headers={"Reply-To": message.reply_to} if message.reply_to else {}))
        sent = await self.provider.send(prepared, {member["email"]: rendered.recipient_variables(values)},
                                        mark={"automated-email-id": welcome["id"], OUTBOX_MARK: key},
                                        message_id=message_id)
        return sent.provider_id


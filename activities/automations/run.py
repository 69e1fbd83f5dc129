"""An automation run's steps: entered at signup, each step reached with the member's state read and
the action's revision fixed, each email sent once (recorded uncertain before it goes out, looked up
by its mark before it is ever sent again)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import asyncpg
from temporalio import activity

from activities.automated_email import (
    TemplateWaiting,
    WelcomeMessage,
    record_automated_send,
    welcome_message,
)
from activities.automations.models import (
    AUTOMATION_MARK,
    AdvanceInput,
    SendStepInput,
    SendStepResult,
    StepPlan,
)
from activities.confirm import confirm_wait, lookup_window
from activities.heartbeat import FIRST_HEARTBEAT_SECONDS, heartbeating
from pressroom.dependencies import Dependencies
from pressroom.email_rendering import ContentError, EmailContent, member_values, render
from pressroom.providers.port import ACCEPTED, UNCERTAIN, Message, ProviderError
from pressroom.store import automations as store

MAX_UNCERTAIN_SENDS = 6  # as the outbox's attempts: then the step fails, still marked uncertain
ERROR_LIMIT = 2000

_STEP_ENDED = ("UPDATE automation_run_steps SET status = $3, error = left($4, 2000), finished_at = now() "
               "WHERE run_id = $1 AND action_id = $2 AND status = 'in_progress'")
_RUN_ENDED = ("UPDATE automation_runs SET status = $2, exit_reason = $3, ended_at = now(), updated_at = now() "
              "WHERE id = $1 AND status = 'in_progress'")

# The email of a send step as the run reached it: its revision's subject and body, its automated
# email's sender; the member as they are now.
_SEND_STEP = """
SELECT s.status AS step_status, s.revision, r.idempotency_key, r.member_id, ae.id, ae.slug, rev.subject, rev.html,
       rev.plaintext, ae.sender_name, ae.sender_email, ae.sender_reply_to, m.uuid, m.email, m.name, m.status
FROM automation_run_steps s JOIN automation_runs r ON r.id = s.run_id
JOIN automation_actions act ON act.id = s.action_id
JOIN automated_emails ae ON ae.id = act.automated_email_id
JOIN automation_action_revisions rev ON rev.action_id = s.action_id AND rev.revision = s.revision
LEFT JOIN members m ON m.id = r.member_id
WHERE s.run_id = $1 AND s.action_id = $2"""

_SENT = ("SELECT provider_id, send_outcome, send_attempts, first_uncertain_at, now() AS now, "
         "extract(epoch FROM now() - last_uncertain_at)::float8 AS uncertain_for "
         "FROM automated_email_recipients WHERE automated_email_id = $1 AND member_id = $2")

# Clicks on an automation email's links count for its automated email.
_STORE_REDIRECTS = """
INSERT INTO redirects (id, "from", "to", automated_email_id)
SELECT id, '/r/' || id, target, $1 FROM unnest($2::text[], $3::text[]) AS t(id, target)
ON CONFLICT DO NOTHING"""


async def reach(conn: asyncpg.Connection, run_id: str, action_id: str) -> StepPlan:
    """The run at its next action: the member's state read (a reason ends the run there, recorded as
    the step's state) and the action's revision fixed for this run."""
    stop = await conn.fetchval(store.MEMBER_STOP, run_id)
    revision = await conn.fetchval(store.REACH_REVISION, action_id)
    step = await conn.fetchrow(
        "INSERT INTO automation_run_steps (run_id, action_id, revision, status) "
        "VALUES ($1, $2, $3, coalesce($4, 'in_progress')) "
        "ON CONFLICT (run_id, action_id) DO UPDATE SET revision = automation_run_steps.revision "
        "RETURNING revision", run_id, action_id, revision, stop)
    await conn.execute("UPDATE automation_runs SET current_action_id = $2, updated_at = now() WHERE id = $1",
                       run_id, action_id)
    if stop is not None:
        await conn.execute(_RUN_ENDED, run_id, "exited_early", stop)
        return StepPlan(action_id=action_id, ended="exited_early", reason=stop)
    action = await conn.fetchrow(
        "SELECT a.type, r.wait_hours FROM automation_actions a LEFT JOIN automation_action_revisions r "
        "ON r.action_id = a.id AND r.revision = $2 WHERE a.id = $1", action_id, step["revision"])
    wait = (action["wait_hours"] or 0.0) * 3600 if action["type"] != "send_email" else 0.0
    email = await conn.fetchval(store.BRANCH_EMAIL, run_id) if action["type"] == "wait_for_click" else None
    return StepPlan(action_id=action_id, type=action["type"], wait_seconds=wait, revision=step["revision"],
                    click_email_id=email)


async def _path_taken(conn: asyncpg.Connection, run_id: str, action_id: str) -> str | None:
    """A branch's path at its wait's end, from the clicks recorded (a lost signal changes nothing);
    recorded on its step. None after any other action."""
    if await conn.fetchval("SELECT type FROM automation_actions WHERE id = $1", action_id) != "wait_for_click":
        return None
    email = await conn.fetchval(store.BRANCH_EMAIL, run_id)
    path = "clicked" if email is not None and await conn.fetchval(store.CLICKED, run_id, email) else "not_clicked"
    await conn.execute("UPDATE automation_run_steps SET path = coalesce(path, $3) WHERE run_id = $1 AND action_id = $2",
                       run_id, action_id, path)
    return await conn.fetchval("SELECT path FROM automation_run_steps WHERE run_id = $1 AND action_id = $2",
                               run_id, action_id)


class AutomationActivities:
    def __init__(self, deps: Dependencies) -> None:
        self.pool = deps.pool
        self.provider = deps.provider
        self.settings = deps.settings
        self.temporal = deps.temporal

    # --- a run's steps ---

    @activity.defn
    async def advance_run(self, input: AdvanceInput) -> StepPlan:
        """The step after `after_action_id` finished, and the next one reached: the member's state read
        (a reason ends the run there), the action's revision fixed. Done again, it answers the same."""
        async with self.pool.acquire() as conn, conn.transaction():
            run = await conn.fetchrow("SELECT automation_id, status, exit_reason FROM automation_runs "
                                      "WHERE id = $1 FOR UPDATE", input.run_id)
            if run is None:
                return StepPlan(ended="exited_early", reason="run removed")
            if run["status"] != "in_progress":
                return StepPlan(ended=run["status"], reason=run["exit_reason"])
            if input.after_action_id is not None:
                await conn.execute(_STEP_ENDED, input.run_id, input.after_action_id, "finished", None)
                path = await _path_taken(conn, input.run_id, input.after_action_id)
                action_id = await conn.fetchval(store.NEXT_ACTION, input.after_action_id, path)
            else:
                action_id = await conn.fetchval(store.FIRST_ACTION, run["automation_id"])
            if action_id is None:
                await conn.execute(_RUN_ENDED, input.run_id, "completed", None)
                return StepPlan(ended="completed")
            return await reach(conn, input.run_id, action_id)

    async def _end(self, run_id: str, action_id: str, status: str, reason: str, error: str | None = None) -> \
            SendStepResult:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(_STEP_ENDED, run_id, action_id, status, error)
            await conn.execute(_RUN_ENDED, run_id, "exited_early", reason)
        return SendStepResult(ended="exited_early", reason=reason)

    @activity.defn
    async def send_step(self, input: SendStepInput) -> SendStepResult:
        """The step's email, once: the member's state read first; an uncertain earlier send looked up by
        its mark; recorded uncertain before the request goes out and accepted after."""
        # Its heartbeat lets a dead worker's send be retried (and looked up) within seconds.
        async with heartbeating(first_after=FIRST_HEARTBEAT_SECONDS):
            return await self._send_step(input)

    async def _send_step(self, input: SendStepInput) -> SendStepResult:
        row = await self.pool.fetchrow(_SEND_STEP, input.run_id, input.action_id)
        if row is None or row["step_status"] != "in_progress":
            return SendStepResult()
        stop = await self.pool.fetchval(store.MEMBER_STOP, input.run_id)
        if stop is not None:
            return await self._end(input.run_id, input.action_id, stop, stop)
        member = {"id": row["member_id"], "uuid": row["uuid"], "email": row["email"], "name": row["name"]}
        sent = await self.pool.fetchrow(_SENT, row["id"], row["member_id"])
        if sent is not None and sent["provider_id"] is not None:  # sent already, by this run or the outbox
            return await self._accepted(input, sent["provider_id"])
        own = f"{row['idempotency_key']}:{input.action_id}"
        message_id = self.provider.message_id(f"automation-{hashlib.sha256(own.encode()).hexdigest()[:24]}")
        mark = {"automated-email-id": row["id"], AUTOMATION_MARK: own}
        if sent is not None and sent["send_outcome"] == UNCERTAIN:
            found = await self._look_up(member, sent, mark, message_id)
            if found is not None:
                return await self._accepted(input, found)
            wait = confirm_wait(sent["uncertain_for"], self.settings, True)
            if wait is not None:
                return SendStepResult(confirm_in_seconds=wait)
            if sent["send_attempts"] >= MAX_UNCERTAIN_SENDS:
                return await self._end(input.run_id, input.action_id, "failed", "failed",
                                       f"sent {sent['send_attempts']} times without a certain answer")
        try:
            message = self._message(row)
        except TemplateWaiting as waiting:
            activity.logger.warning("automation run %s: %s", input.run_id, waiting)
            return SendStepResult(confirm_in_seconds=self.settings.welcome_template_retry_seconds)
        await record_automated_send(self.pool, row["id"], member, UNCERTAIN, sending=True)  # until the answer says
        try:
            provider_id = await self._send(row, message, mark, message_id)
        except ProviderError as error:
            await record_automated_send(self.pool, row["id"], member, error.outcome)
            if error.retryable or error.may_have_been_accepted:
                raise  # an outage is waited out by the activity's retries; an uncertain one is looked up
            return await self._end(input.run_id, input.action_id, "failed", "failed", str(error)[:ERROR_LIMIT])
        await record_automated_send(self.pool, row["id"], member, ACCEPTED, provider_id=provider_id)
        return await self._accepted(input, provider_id)

    async def _accepted(self, input: SendStepInput, provider_id: str) -> SendStepResult:
        await self.pool.execute("UPDATE automation_run_steps SET provider_id = $3, send_outcome = 'accepted' "
                                "WHERE run_id = $1 AND action_id = $2", input.run_id, input.action_id, provider_id)
        return SendStepResult(provider_id=provider_id)

    async def _look_up(self, member: asyncpg.Record, sent: asyncpg.Record,
                       mark: dict[str, str], message_id: str) -> str | None:
        begin, end = lookup_window(sent["first_uncertain_at"] or datetime.now(UTC) - timedelta(days=3), sent["now"])
        return await self.provider.find_accepted(recipient=member["email"], mark=mark, begin=begin, end=end,
                                                 message_id=message_id)

    def _message(self, row: asyncpg.Record) -> WelcomeMessage:
        """A welcome automation's email exactly as the welcome was before automations; any other
        with the footer's unsubscribe link and its links tracked, as a newsletter's."""
        if row["slug"].startswith(store.WELCOME_EMAIL_PREFIX):
            return welcome_message(row, self.settings)
        welcome = welcome_message(row, self.settings)  # its sender and subject checked as headers
        try:
            rendered = render(EmailContent(email_id=row["id"], subject=row["subject"], html=row["html"],
                                           visibility="public", post_url="", upgrade_url="", track_clicks=True,
                                           site_url=self.settings.site_url), None)
        except ContentError as error:
            raise TemplateWaiting(f"the automation's {error}") from None
        return WelcomeMessage(rendered, welcome.from_address, welcome.reply_to)

    async def _send(self, row: asyncpg.Record, message: WelcomeMessage, mark: dict[str, str], message_id: str) -> str:
        rendered = message.rendered
        if rendered.links:
            await self.pool.execute(_STORE_REDIRECTS, row["id"], list(rendered.links), list(rendered.links.values()))
        values = member_values(name=row["name"], email=row["email"], uuid=str(row["uuid"]), status=row["status"],
                               site_url=self.settings.site_url,
                               link_secret=self.settings.require_members_link_secret())
        welcome = row["slug"].startswith(store.WELCOME_EMAIL_PREFIX)
        prepared = self.provider.prepare(Message(
            from_address=message.from_address, subject=rendered.subject, html=rendered.html, text=rendered.text,
            tags=["welcome-email" if welcome else "automation-email"],
            headers={"Reply-To": message.reply_to} if message.reply_to else {}))
        result = await self.provider.send(prepared, {row["email"]: rendered.recipient_variables(values)},
                                          mark=mark, message_id=message_id)
        return result.provider_id

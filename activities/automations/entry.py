"""Entering a welcome automation at signup: the outbox's MemberCreatedEvent handler records the
member's run and its first step, sends the welcome as it always has, then starts the run."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import asyncpg
from temporalio import activity
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from activities.automated_email import skipped
from activities.automations.models import AutomationRunInput
from activities.automations.run import reach
from pressroom.dependencies import Dependencies
from pressroom.store import automations as store

# A welcome automation and its first step's automated email (the fields a welcome's send reads).
_WELCOME = f"""
SELECT a.id AS automation_id, a.status AS automation_status, act.id AS action_id, ae.id, ae.status, ae.subject,
       ae.html, ae.plaintext, ae.sender_name, ae.sender_email, ae.sender_reply_to
FROM automations a LEFT JOIN automation_actions act ON act.id = ({store.FIRST_ACTION.replace("$1", "a.id")})
LEFT JOIN automated_emails ae ON ae.id = act.automated_email_id AND act.type = 'send_email'
WHERE a.slug = $1"""


@dataclass(frozen=True)
class Entered:
    """A member entered into a welcome automation, or why not (`skipped`, the entry's result)."""
    skipped: dict[str, Any] | None = None
    email: asyncpg.Record | None = None
    run_id: str | None = None
    key: str | None = None
    action_id: str | None = None


class WelcomeAutomations:
    """Not activities of their own: the welcome's handler calls them."""

    def __init__(self, deps: Dependencies) -> None:
        self.pool = deps.pool
        self.settings = deps.settings
        self.temporal = deps.temporal

    async def enter_welcome(self, member: asyncpg.Record) -> Entered:
        """The member enters the welcome automation of their status, once: its run and its first step
        (the welcome email, which the outbox's delivery sends as it always has) are recorded; an
        entry handled again finds both."""
        await store.ensure_welcome_automations(self.pool)
        slug = store.WELCOME_OF_STATUS[member["status"]]
        email_slug = store.WELCOME_AUTOMATIONS[slug][2]
        if email_slug != f"member-welcome-email-{member['status']}":
            activity.logger.info("no welcome email of their own for %s members: sending them %s",
                                 member["status"], email_slug)
        welcome = await self.pool.fetchrow(_WELCOME, slug)
        if welcome is None or welcome["id"] is None or welcome["status"] != "active" \
                or welcome["automation_status"] != "active":
            return Entered(skipped=skipped(
                "WELCOME_INACTIVE", f"no active welcome email {email_slug} for {member['status']} members "
                                    f"(`pressroom automations enable {slug}` turns it on)"))
        key = store.run_key(welcome["automation_id"], member["id"])
        async with self.pool.acquire() as conn, conn.transaction():
            run_id = await conn.fetchval(store.ENTER_RUN, welcome["automation_id"], member["id"], key)
            plan = await reach(conn, run_id, welcome["action_id"])
        if plan.ended is not None:
            return Entered(skipped=skipped("WELCOME_NOT_SENT", f"member {member['id']}: {plan.reason}"))
        return Entered(email=welcome, run_id=run_id, key=key, action_id=welcome["action_id"])

    async def welcome_sent(self, entered: Entered, provider_id: str) -> None:
        """The welcome step accepted: recorded, and the run started to take the steps after it."""
        assert entered.run_id is not None and entered.key is not None
        await self.pool.execute("UPDATE automation_run_steps SET provider_id = $3, send_outcome = 'accepted' "
                                "WHERE run_id = $1 AND action_id = $2", entered.run_id, entered.action_id,
                                provider_id)
        await self.start_run(AutomationRunInput(run_id=entered.run_id, after_action_id=entered.action_id),
                             entered.key)

    async def start_run(self, input: AutomationRunInput, key: str) -> None:
        # By its registered name: activities do not import workflow code. Entered twice: one run.
        with contextlib.suppress(WorkflowAlreadyStartedError):
            await self.temporal.start_workflow(
                "AutomationRunWorkflow", input, id=key,
                task_queue=self.settings.task_queue, id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                static_summary=f"Automation run {input.run_id}")

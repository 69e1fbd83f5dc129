"""One workflow per automation run: its waits are durable timers, its emails sent once each.

The run's id is its idempotency key (`automation-{automation_id}-{member_id}`): a member entering the
same automation twice gets one run. Each step is reached by `advance_run`, which reads the member's
state then (a reason to stop ends the run there, recorded) and fixes the action's revision, so an
edit applies to runs that have not reached the step yet. The run holds no member data: its input
and results are ids, counts and reasons.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.automations.models import (
        AdvanceInput,
        AutomationRunInput,
        ClickedSignal,
        SendStepInput,
        StepPlan,
    )
    from activities.automations.run import AutomationActivities
    from workflows.policies import DATABASE_RETRY

# An outage of the provider is waited out: the send is retried for as long as it takes, each try
# looking up an uncertain one first.
SEND_RETRY = RetryPolicy(initial_interval=timedelta(seconds=2), backoff_coefficient=2.0,
                         maximum_interval=timedelta(minutes=10))


@workflow.defn
class AutomationRunWorkflow:
    def __init__(self) -> None:
        self._clicked: set[str] = set()  # automated emails the member clicked, as the front door signalled

    @workflow.signal
    def clicked(self, signal: ClickedSignal) -> None:
        self._clicked.add(signal.automated_email_id)

    @workflow.run
    async def run(self, input: AutomationRunInput) -> str:
        plan = await self._advance(AdvanceInput(run_id=input.run_id, after_action_id=input.after_action_id))
        while plan.ended is None and plan.action_id is not None:
            if plan.type == "wait":
                await workflow.sleep(timedelta(seconds=plan.wait_seconds), summary="wait")
            elif plan.type == "wait_for_click":
                await self._wait_for_click(plan)
            else:
                ended = await self._send(input.run_id, plan.action_id)
                if ended is not None:
                    return ended
            plan = await self._advance(AdvanceInput(run_id=input.run_id, after_action_id=plan.action_id))
        ended = plan.ended or "completed"
        return ended if plan.reason is None else f"{ended}: {plan.reason}"

    async def _wait_for_click(self, plan: StepPlan) -> None:
        """Until the member clicks the email before (signalled) or the wait ends; the path is then
        read from the clicks recorded, so a lost signal only waits the whole time."""
        email = plan.click_email_id
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(lambda: email in self._clicked, timeout=timedelta(seconds=plan.wait_seconds))

    @staticmethod
    async def _advance(input: AdvanceInput) -> StepPlan:
        return await workflow.execute_activity_method(
            AutomationActivities.advance_run, input, start_to_close_timeout=timedelta(seconds=30),
            retry_policy=DATABASE_RETRY, summary="next step")

    @staticmethod
    async def _send(run_id: str, action_id: str) -> str | None:
        step = SendStepInput(run_id=run_id, action_id=action_id)
        while True:
            sent = await workflow.execute_activity_method(
                AutomationActivities.send_step, step, start_to_close_timeout=timedelta(minutes=2),
                heartbeat_timeout=timedelta(seconds=10), retry_policy=SEND_RETRY, summary="send email")
            if sent.confirm_in_seconds is None:
                return None if sent.ended is None else f"{sent.ended}: {sent.reason}"
            # The send may have reached the provider and is not in its events yet: look again later.
            await workflow.sleep(timedelta(seconds=sent.confirm_in_seconds), summary="confirming the send")

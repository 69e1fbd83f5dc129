"""The inputs and results of an automation run's activities."""

from __future__ import annotations

from pydantic import BaseModel

AUTOMATION_WORKFLOW_PREFIX = "automation-"
AUTOMATION_MARK = "pressroom-automation"  # the v: variable that proves which run and step an email carried


class AutomationRunInput(BaseModel):
    run_id: str
    after_action_id: str | None = None  # the step taken before the run started (a welcome the outbox sent)


class AdvanceInput(BaseModel):
    run_id: str
    after_action_id: str | None = None  # None: the path's first action


class StepPlan(BaseModel):
    """The step the run takes next, or why it ended (`ended`: completed or exited_early, with `reason`)."""
    action_id: str | None = None
    type: str | None = None  # wait | send_email | wait_for_click
    wait_seconds: float = 0.0
    # A wait_for_click's email: a click on its links ends the wait early (the run's `clicked` signal).
    click_email_id: str | None = None
    revision: int | None = None
    ended: str | None = None
    reason: str | None = None


class SendStepInput(BaseModel):
    run_id: str
    action_id: str


class SendStepResult(BaseModel):
    provider_id: str | None = None
    # Set when an uncertain send is not in the provider's events yet: nothing was sent; ask again then.
    confirm_in_seconds: float | None = None
    ended: str | None = None  # the run ended at this step (exited_early), with why
    reason: str | None = None


class ClickedSignal(BaseModel):
    """A run's member clicked a link of this automated email (sent by the front door's redirect)."""
    automated_email_id: str

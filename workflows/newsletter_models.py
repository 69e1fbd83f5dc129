"""The newsletter send's workflow id and the models it takes, answers and carries over a continue-as-new."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.newsletter.models import SendPlan

NEWSLETTER_WORKFLOW_PREFIX = "newsletter-"



def newsletter_workflow_id(email_id: str) -> str:
    return f"{NEWSLETTER_WORKFLOW_PREFIX}{email_id}"


class SendNewsletterInput(BaseModel):
    email_id: str
    resume: Resume | None = None  # set only when the run continues as new


class CancelSendInput(BaseModel):
    """Who cancels a send (`pressroom newsletter cancel`): an operator's name, as the CLI gives it."""

    by: str


class ResumePausedInput(BaseModel):
    """Who resumes a paused send (`pressroom newsletter resume`)."""

    by: str


class NewsletterProgress(BaseModel):
    """What the `progress` query answers: the CLI's progress bar and the Web UI read it."""

    email_id: str
    status: str = "starting"  # starting | sending | paused | cancelling | submitted | failed | skipped | cancelled
    batches_total: int = 0
    batches_sent: int = 0
    batches_failed: int = 0
    recipients_total: int = 0
    recipients_sent: int = 0
    message: str = ""
    # Batches (numbered from 1) whose send may have reached the provider and which are being looked up
    # in its events, waiting for them to appear, before anything is sent again.
    confirming: list[int] = []


class Outage(BaseModel):
    """The provider unreachable: since when, how many waits so far, and when every sender tries next."""

    since: datetime
    waits: int = 0
    next_try: datetime | None = None


class Resume(BaseModel):
    """What a continued run carries over: the plan and the progress so far."""

    plan: SendPlan
    progress: NewsletterProgress
    started_at: float  # epoch seconds of the first run's start, for delivery-time spreading
    dispatched: int  # batches handed to the provider so far, for delivery-time spreading
    # An operator resumed a send paused for its rates: it is not paused for them again.
    pause_overridden: bool = False


@dataclass
class ReputationWatch:
    """Whether the send watches its early rates, whether a look is under way, and when the last was."""

    watching: bool = False
    looking: bool = False
    last_look: datetime | None = None


SendNewsletterInput.model_rebuild()

"""The outbox's event types, and the inputs and results that cross the Temporal boundary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

ERROR_LIMIT = 2000  # stored error text is capped: enough to diagnose, and a row stays small
OUTBOX_WORKFLOW_PREFIX = "outbox-"


# --- event types ----------------------------------------------------------------------------------

class MemberCreatedEvent(BaseModel):
    member_id: str
    # Whether the member's welcome email was asked for when they were added (the reference sends none
    # unless asked: `send_email`, `--welcome`). An entry without the field was queued to be welcomed
    # (before the option existed, and by `members import --welcome`).
    welcome: bool = True


# The reference platform's events Pressroom emits for integrations' webhooks (its names). Its others
# (tags, pages, site.changed) have no change in Pressroom to come from.
SITE_EVENTS = ("post.published", "post.published.edited", "post.unpublished", "post.scheduled",
               "post.unscheduled", "post.rescheduled", "member.added", "member.edited", "member.deleted")


class SiteWebhookEvent(BaseModel):
    """A site event for one webhook: the body as it is sent (activities/outbox/site_events.py)."""
    model_config = ConfigDict(extra="allow")  # member_id or post_id, for the operator's look-ups
    event: str  # the reference platform's name: member.added, post.published, …
    webhook_id: str
    body: dict[str, Any] | None = None  # None once cleared (its webhook removed, its member deleted)


class NoopEvent(BaseModel):
    """Does nothing: for benchmarks and smoke checks of the pipeline itself."""


@dataclass(frozen=True)
class EventType:
    """An event type the outbox delivers: the model its payload must fit, and the
    OutboxDeliveryActivities method that handles it."""
    payload: type[BaseModel]
    handler: str


# The one registry of event types: a new type is one line here and its handler method. The site's
# events (member.added, post.published, …) each go to one integration's webhook.
EVENT_TYPES: dict[str, EventType] = {
    "MemberCreatedEvent": EventType(MemberCreatedEvent, "_welcome_member"),
    "NoopEvent": EventType(NoopEvent, "_noop"),
    **{name: EventType(SiteWebhookEvent, "_site_webhook") for name in SITE_EVENTS},
}

# The automated email each member status is welcomed with. Comped members have none of their own:
# they get the paid one, as the reference platform does.
WELCOME_EMAIL_SLUGS = {"free": "member-welcome-email-free", "paid": "member-welcome-email-paid",
                       "comped": "member-welcome-email-paid"}


def webhooks_task_queue(task_queue: str) -> str:
    """The task queue of the site's webhook deliveries: workers of their own, so that slow targets
    never take the activity slots of welcome emails or newsletters."""
    return f"{task_queue}-webhooks"


def outbox_workflow_id(idempotency_key: str) -> str:
    """The delivery workflow's id: the entry's idempotency key, so one entry is delivered by one run."""
    return f"{OUTBOX_WORKFLOW_PREFIX}{idempotency_key}"


# --- inputs and results ---------------------------------------------------------------------------

class RelayInput(BaseModel):
    run_seconds: float = 300  # then the workflow calls again (and continues as new now and then)


class RelayResult(BaseModel):
    started: int


class EntryInput(BaseModel):
    outbox_id: str
    max_attempts: int = 6  # the protocol's MAX_ATTEMPTS, from the relay's settings
    # The delivery waits on a timer for an uncertain send's events when asked to
    # (EntryResult.confirm_in_seconds). False: deliveries started before that existed resend at once.
    confirm: bool = False
    # True: the handler's activity records the entry succeeded itself once the handler returns (the
    # ledger says so before a retry could handle it again). False: deliveries started before that
    # existed complete it in a step of their own.
    complete: bool = False
    # True: a MemberCreatedEvent enters the member into their welcome automation, whose run sends the
    # welcome. False: deliveries started before automations send the welcome email themselves.
    automation: bool = False


class EntryResult(BaseModel):
    result: dict[str, Any]
    already_succeeded: bool = False  # the ledger had it (W-105, docs/operating.md "The outbox"): nothing was handled
    # Set when an uncertain send is not in the provider's events yet, or the entry waits for what it
    # needs (a welcome email whose template cannot be rendered): nothing was sent; handle again then.
    confirm_in_seconds: float | None = None
    completed: bool = False  # the ledger line and the entry's state are written (EntryInput.complete)


class CompleteEntryInput(BaseModel):
    outbox_id: str
    result: dict[str, Any]


class AbortEntryInput(BaseModel):
    outbox_id: str
    code: str
    message: str


"""What the operations answer: the models that the printers, `--json`, the pages and an API read.

Each model is the contract of one answer; its fields are the `--json` shape (`model_dump(mode="json")`,
documented in docs/operating.md from these classes). A field an operation adds without adding it
here fails at once (`extra="forbid"`), so a shape never changes by accident. Times keep their
offset as ISO 8601 (`2026-11-25T15:34:10.123456+00:00`), as `--json` has always written them.
"""

from __future__ import annotations

import re
import types
import typing
from datetime import UTC, datetime
from typing import Annotated, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, PlainSerializer

from workflows.newsletter_models import NewsletterProgress


def _iso(value: datetime) -> str:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()


Moment = Annotated[datetime, PlainSerializer(_iso, return_type=str, when_used="json")]


class Answer(BaseModel):
    # defer_build: each schema is built at its first use, so a command pays only for what it prints.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    def as_json(self) -> dict:
        """The `--json` document."""
        return self.model_dump(mode="json")


Row = TypeVar("Row", bound=Answer)


class Page(Answer, Generic[Row]):
    """One page of a list, newest first; `next_after` is the id to pass as `after` for the next
    page (None on the last)."""

    items: list[Row]
    next_after: str | None


# --- newsletter list, members list, posts list, outbox list -------------------------------------

class EmailRow(Answer):
    email_id: str
    post_id: str | None
    newsletter_id: str | None
    newsletter: str | None
    subject: str | None
    status: str
    error: str | None
    recipients: int
    delivered: int
    opened: int
    failed: int  # recipients with a recorded failure, permanent or temporary (the report's)
    created_at: Moment
    submitted_at: Moment | None
    will_not_go_out: str | None  # why its post's newsletter will not send it, if so


class MemberRow(Answer):
    member_id: str
    email: str
    name: str | None
    status: str
    email_disabled: bool
    suppressed: str | None  # the suppression's reason (bounce, spam), if any
    email_count: int
    email_opened_count: int
    email_open_rate: int | None
    created_at: Moment


class PostRow(Answer):
    post_id: str
    title: str | None
    status: str
    visibility: str | None
    publish_at: Moment | None
    published_at: Moment | None
    newsletter_id: str | None
    newsletter: str | None
    email_id: str | None
    email_status: str | None
    created_at: Moment


class OutboxRow(Answer):
    outbox_id: str
    event_type: str
    status: str
    attempts: int
    member_id: str | None
    idempotency_key: str
    last_error_code: str | None
    next_run_at: Moment | None
    created_at: Moment
    processed_at: Moment | None


class LeftOutRow(Answer):
    member_id: str
    email: str
    name: str | None
    status: str
    reason: str
    suppressed_by: str | None
    created_at: Moment


# --- newsletter status ---------------------------------------------------------------------------

class BatchCounts(Answer):
    total: int
    submitted: int
    failed: int


class RunView(Answer):
    run_id: str
    status: str | None
    task_queue: str
    worker_polling: bool | None  # None: not asked (the run is not running) or no answer in time
    worker_answering: bool | None
    query_seconds: float  # the bound the questions to Temporal were held to


class NewsletterStatus(Answer):
    email_id: str
    status: str
    error: str | None
    submitted_at: Moment | None
    workflow_id: str
    run: RunView | None  # None: never started, or Temporal unreachable (`temporal` says so)
    progress: NewsletterProgress | None  # the run's own answer while it runs and a worker answers
    batches: BatchCounts
    recipients: int
    recipients_expected: int | None
    waiting_for: str | None
    skipped_recipients: int | None
    cancelled_by: str | None
    cancelled_at: Moment | None
    temporal: str | None  # why Temporal could not be read, if it could not


# --- newsletter report ---------------------------------------------------------------------------

class UnsubscribedThrough(Answer):
    link: int
    provider: int


class ReportRates(Answer):
    """Percentages of recipients, one decimal; None when there are no recipients."""

    delivered: float | None
    opened: float | None
    failed: float | None
    unsubscribed: float | None
    complained: float | None


class SegmentRates(Answer):
    delivered: float | None
    opened: float | None


class SegmentOutcome(Answer):
    segment: str
    recipients: int
    sent: int
    delivered: int
    opened: int
    unsubscribed: int
    rates: SegmentRates


# A diagnostic's type before its text (RFC 3464's Diagnostic-Code, "smtp; 452 4.2.2 …", as SES gives it).
_DIAGNOSTIC_TYPE = re.compile(r"^\s*(?:smtp|x-[\w.-]+)\s*;\s*", re.IGNORECASE)


def reason_words(code: int | None, enhanced_code: str | None, message: str | None) -> str:
    """A failure's codes and message, each code said once: a provider's message often begins with
    them ("4.2.2 The email account …", "452 4.2.2 …", "smtp; 452-4.2.2 …"), and is shown after them."""
    codes = [str(c) for c in (code, enhanced_code) if c]
    rest = _DIAGNOSTIC_TYPE.sub("", message or "").split()
    while rest and (parts := [p for p in re.split(r"[-#:,]", rest[0]) if p]) and all(p in codes for p in parts):
        rest.pop(0)
    return " ".join(codes + rest)


class FailureReason(Answer):
    severity: str
    code: int | None
    enhanced_code: str | None
    message: str | None
    n: int

    def words(self) -> str:
        """Its codes and message, each code said once, as the CLI and the dashboard show it."""
        return reason_words(self.code, self.enhanced_code, self.message)


class OpensBucket(Answer):
    at: Moment
    opens: int


class OpensOverTime(Answer):
    bucket_seconds: int | None
    buckets: list[OpensBucket]


class TopLink(Answer):
    target: str
    clickers: int  # members who followed it at least once
    clicks: int  # members' requests (those naming no member are the email's without_member only)


class EmailClicks(Answer):
    clicked: int  # members who followed a link at least once
    rate: float | None  # of `clicked` over delivered, percent
    clicks: int  # readers' requests
    without_member: int  # readers' requests whose link named no member (forwarded)
    set_apart: int  # requests taken for a mail scanner's, in no other figure
    set_apart_by: dict[str, int]  # user-agent | address | burst | delivery
    top_links: list[TopLink]


class MemberClick(Answer):
    at: Moment
    target: str
    email_id: str | None
    scanner: str | None  # why it was taken for a scanner's; None: the member's own


class ReportReputation(Answer):
    """As mailbox providers count them, in percent: hard bounces over sent, complaints over delivered."""

    hard_bounce_rate: float | None
    complaint_rate: float | None


class EmailReport(Answer):
    email_id: str
    subject: str | None
    status: str
    error: str | None
    post_id: str | None
    newsletter_id: str | None
    newsletter: str | None
    recipient_filter: str | None
    created_at: Moment
    submitted_at: Moment | None
    cancelled_by: str | None
    cancelled_at: Moment | None
    recipients: int
    sent: int
    delivered: int
    opened: int
    unsubscribed: int
    unsubscribed_through_email: UnsubscribedThrough
    failed: int
    failed_permanent: int
    failed_temporary: int
    complained: int
    rates: ReportRates
    segments: list[SegmentOutcome]
    reputation: ReportReputation
    top_failures: list[FailureReason]
    left_out: dict[str, int]  # by reason (activities/newsletter/left_out.py's LEFT_OUT_REASONS), every reason
    opens_over_time: OpensOverTime
    clicks: EmailClicks


# --- members show --------------------------------------------------------------------------------

class MemberTier(Answer):
    slug: str
    name: str
    expiry_at: Moment | None
    expired: bool


class Suppression(Answer):
    reason: str
    email_id: str | None
    created_at: Moment


class Subscription(Answer):
    newsletter_id: str
    slug: str
    name: str
    status: str
    subscribed: bool
    left_at: Moment | None
    left_by: str | None  # link, provider or operator
    left_through_email: str | None


class MemberOutboxEntry(Answer):
    outbox_id: str
    event_type: str
    status: str
    attempts: int
    last_error_code: str | None
    created_at: Moment
    processed_at: Moment | None


class AutomatedEmailSent(Answer):
    slug: str
    send_outcome: str | None
    created_at: Moment


class MemberEmail(Answer):
    email_id: str
    subject: str | None
    email_status: str
    created_at: Moment
    sent_at: Moment | None
    delivered_at: Moment | None
    opened_at: Moment | None
    failed_at: Moment | None
    failure: str | None
    failure_code: int | None
    failure_enhanced_code: str | None = None
    failure_message: str | None
    complained_at: Moment | None
    outcome: str

    def failure_words(self) -> str:
        """The failure's codes and message, each code said once (as `newsletter report` says a reason)."""
        return reason_words(self.failure_code, self.failure_enhanced_code, self.failure_message)


# --- automations (operations/automations.py, docs/automations.md) ---

class AutomationAction(Answer):
    id: str
    position: int
    type: str  # wait | send_email
    revision: int | None
    wait_hours: float | None = None
    subject: str | None = None
    automated_email_id: str | None = None
    sent: int = 0  # steps of this action whose email the provider accepted
    in_progress: int = 0  # runs on this step now (waiting, or sending)


class AutomationEdge(Answer):
    source_action_id: str
    target_action_id: str
    condition: str | None = None  # a branch's edge: clicked | not_clicked


class AutomationRow(Answer):
    id: str
    slug: str
    name: str
    status: str  # active | inactive
    member_statuses: list[str]
    actions: int
    in_progress: int
    completed: int
    exited_early: int
    created_at: Moment
    updated_at: Moment


class Automation(Answer):
    automation: AutomationRow
    actions: list[AutomationAction]  # in the path's order
    edges: list[AutomationEdge]


class AutomationStep(Answer):
    action_id: str
    type: str
    revision: int
    status: str
    provider_id: str | None
    error: str | None
    started_at: Moment
    finished_at: Moment | None
    path: str | None = None  # a branch's step: the path it took (clicked | not_clicked)


class AutomationRun(Answer):
    id: str
    member_id: str | None  # None once the member was deleted
    status: str
    exit_reason: str | None
    current_action_id: str | None
    created_at: Moment
    ended_at: Moment | None
    steps: list[AutomationStep]


class AutomationRuns(Answer):
    automation_id: str
    status: str | None
    runs: list[AutomationRun]


class EntriesOnDay(Answer):
    day: str  # YYYY-MM-DD
    entries: int


class AutomationStats(Answer):
    automation_id: str
    entries: list[EntriesOnDay]  # per day, the last 30 days with any
    sent: int
    opened: int | None  # opens of automation emails are not applied from the provider's events yet
    clicked: int  # members who clicked a tracked link of its emails (scanners left out)
    open_rate: float | None
    click_rate: float | None


class MemberProfile(Answer):
    member_id: str
    email: str
    name: str | None
    note: str | None
    status: str
    email_disabled: bool
    email_count: int
    email_opened_count: int
    email_open_rate: int | None
    created_at: Moment
    labels: list[str]
    tiers: list[MemberTier]
    suppression: Suppression | None
    subscriptions: list[Subscription]
    outbox: list[MemberOutboxEntry]
    automated_emails: list[AutomatedEmailSent]
    emails: list[MemberEmail]
    clicks: list[MemberClick]  # their last clicks on newsletters' links
    last_seen_at: Moment | None
    automation_runs: list[AutomationRun] = []  # their runs of automations, newest first, with their steps


# --- outbox status, check ------------------------------------------------------------------------

class OutboxReason(Answer):
    code: str | None
    reason: str | None
    count: int


class OutboxStatus(Answer):
    counts: dict[str, int]  # by state
    oldest_pending_seconds: float | None
    waiting: list[OutboxReason]  # pending entries put back to wait, by why
    skipped: list[OutboxReason]
    by_event: dict[str, dict[str, int]]  # the site's events for integrations' webhooks: event type → state → n
    by_webhook: dict[str, dict[str, int]]  # webhook id → state → n


class ServiceCheck(Answer):
    service: str
    ok: bool
    warning: bool = False  # ok, but something to act on before it fails (a missing DMARC record)
    state: str = "ok"  # ok | warn | FAIL | skip: CheckResult.state, the word the CLI and the health page show
    detail: str


class CheckReport(Answer):
    ok: bool
    services: list[ServiceCheck]


# --- the `--json` shapes, documented from the models (docs/answers.md) ---------------------------

DOCUMENTED: dict[str, tuple[type[BaseModel], str]] = {  # command: (model, what the document is)
    "newsletter list": (Page[EmailRow], "one page of emails"),
    "newsletter status": (NewsletterStatus, "an email's state, batches and run"),
    "newsletter report": (EmailReport, "how an email did"),
    "members list": (Page[MemberRow], "one page of members"),
    "members list --left-out-of": (Page[LeftOutRow], "one page of the members an email left out"),
    "members show": (MemberProfile, "one member's story"),
    "posts list": (Page[PostRow], "one page of posts"),
    "outbox list": (Page[OutboxRow], "one page of outbox entries"),
    "outbox status": (OutboxStatus, "the outbox by state"),
    "check": (CheckReport, "every service's check"),
    "automations show": (Automation, "one automation's path"),
    "automations runs": (AutomationRuns, "an automation's latest runs with their steps"),
    "automations stats": (AutomationStats, "an automation's figures"),
}


def _kind(annotation: object) -> str:
    """A field's type as the JSON reader sees it."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _kind(args[0])
    if origin in (types.UnionType, typing.Union):
        kinds = [_kind(arg) for arg in args if arg is not type(None)]
        return " or ".join(kinds) + (" or null" if type(None) in args else "")
    if origin is list:
        return f"[{_kind(args[0])}]"
    if origin is dict:
        return f"{{{_kind(args[0])}: {_kind(args[1])}}}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation.__name__
    return {str: "string", int: "integer", float: "number", bool: "boolean",
            datetime: "time (ISO 8601 with offset)"}.get(annotation, str(annotation))  # type: ignore[call-overload]


def _models_in(model: type[BaseModel], seen: dict[str, type[BaseModel]]) -> None:
    seen.setdefault(model.__name__, model)
    for field in model.model_fields.values():
        stack = [field.annotation]
        while stack:
            annotation = stack.pop()
            if (isinstance(annotation, type) and issubclass(annotation, BaseModel)
                    and annotation.__name__ not in seen):
                _models_in(annotation, seen)
            stack.extend(typing.get_args(annotation))


def shapes_markdown() -> str:
    """docs/answers.md: each command's `--json` document and every model it holds, field by field."""
    lines = ["# The answers' shapes (`--json`)", "",
             "Generated from operations/answers.py (`python -m operations.answers > docs/answers.md`; a test keeps",
             "them equal). Times are ISO 8601 strings with their offset; an absent value is `null`; keys are only",
             "ever added.", "", "| command | document |", "|---|---|"]
    models: dict[str, type[BaseModel]] = {}
    for command, (model, what) in DOCUMENTED.items():
        lines.append(f"| `{command} --json` | {what}: `{model.__name__}` |")
        _models_in(model, models)
    for name, model in models.items():
        lines += ["", f"## {name}", ""]
        doc = (model.__doc__ or "").strip()
        if doc and not doc.startswith(("A base class", "Usage docs")) and model.__module__ == __name__:
            lines += [" ".join(doc.split()), ""]
        lines += ["| field | type |", "|---|---|"]
        lines += [f"| `{field}` | {_kind(info.annotation)} |" for field, info in model.model_fields.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(shapes_markdown(), end="")

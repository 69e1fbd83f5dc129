"""Newsletter sending, client side: start the send of an email, follow its progress; preview it and
send a test copy."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import getpass
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, timedelta

from pydantic import BaseModel
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.email_content import load_email, load_member_values, no_sender
from activities.newsletter.audience import entitled
from activities.newsletter.counts import batch_counts
from activities.newsletter.lock import ARCHIVED_NEWSLETTER
from operations.answers import NewsletterStatus
from operations.common import running, temporal_client
from operations.finding import SHOWN_ERROR, SHOWN_STATUS
from operations.members import _member_row
from operations.waiting import (
    QUERY_TIMEOUT,
    as_words,
    has_worker,
    is_unanswered,
    no_answer_message,
    open_timer,
    status_query_seconds,
    watching_for_worker,
)
from pressroom import database, tracing
from pressroom.email_rendering import (
    SEGMENT_NAMES,
    ContentError,
    clip_warning,
    member_values,
    render,
    segment_for,
    segment_sizes,
)
from pressroom.errors import BadInput, NotFound, PressroomError, cause_of
from pressroom.inputs import email_address, entity_id
from pressroom.providers.port import Message, ProviderError
from pressroom.providers.wiring import provider_from_settings
from pressroom.readable import when
from pressroom.recipient_filter import FilterError, parse
from pressroom.settings import Settings, get_settings
from pressroom.temporal import TemporalUnavailable, describe_rpc_error
from workflows.newsletter import SendNewsletterWorkflow
from workflows.newsletter_models import CancelSendInput, ResumePausedInput, SendNewsletterInput, newsletter_workflow_id


@dataclass(frozen=True)
class NewsletterStart:
    workflow_id: str
    run_id: str
    started: bool  # False: an existing run was found, and `message` says which
    message: str
    sizes: dict[str, int] = field(default_factory=dict)  # each segment's HTML in bytes, for a send started
    warning: str | None = None  # Gmail would clip it (pressroom/email_rendering.py's clip_warning)


@tracing.traced("pressroom newsletter send", "email_id")
async def start_newsletter(email_id: str, *, client=None, settings: Settings | None = None) -> NewsletterStart:
    """Start the send of an email, or find the run that already sends or sent it."""
    entity_id(email_id, "email")
    settings = settings or get_settings()
    settings.require_members_link_secret()  # each reader's unsubscribe link is signed with it
    async with database.connection(settings.require_database()) as conn:
        email = await conn.fetchrow("SELECT e.status, e.post_id, e.newsletter_id, e.recipient_filter, "
                                    "p.status AS post_status, p.published_at, n.status AS newsletter_status, "
                                    "n.slug AS newsletter_slug, n.sender_email "
                                    "FROM emails e LEFT JOIN posts p ON p.id = e.post_id "
                                    "LEFT JOIN newsletters n ON n.id = e.newsletter_id WHERE e.id = $1", email_id)
    if email is None:
        raise NotFound(f"email {email_id} does not exist")
    status = email["status"]
    if status in ("pending", "failed"):
        _check_filter(email_id, email["recipient_filter"])
    if status != "submitted" and (refused := not_published_yet(email_id, email)):
        raise BadInput(refused)
    if status in ("pending", "failed") and email["newsletter_status"] == "archived":
        raise BadInput(f"{ARCHIVED_NEWSLETTER} (email {email_id}: newsletter {email['newsletter_id']} is archived)")
    if status in ("pending", "failed") and not email["sender_email"] and not settings.from_address:
        raise BadInput(no_sender(email_id, email["newsletter_slug"]))  # the send's lock refuses it too
    client = client or await temporal_client(settings)
    workflow_id = newsletter_workflow_id(email_id)
    if status == "submitted":
        try:
            last = await client.get_workflow_handle(workflow_id).describe()
            by = f" by run {last.run_id} ({last.status.name.lower() if last.status else 'unknown'})"
        except RPCError:
            by = ""
        return NewsletterStart(workflow_id, "", False, f"email {email_id} was already sent{by}; nothing to send")
    if status == "cancelled":
        raise BadInput(f"email {email_id} was cancelled (`pressroom newsletter status {email_id}` says by whom); "
                       "it is not sent again")
    try:
        handle = await client.start_workflow(
            SendNewsletterWorkflow.run, SendNewsletterInput(email_id=email_id), id=workflow_id,
            task_queue=settings.task_queue, id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            static_summary=f"Send email {email_id} to its newsletter's members")
    except WorkflowAlreadyStartedError as error:
        found = await client.get_workflow_handle(workflow_id).describe()
        if found.status == WorkflowExecutionStatus.RUNNING:
            return NewsletterStart(workflow_id, error.run_id or found.run_id, False,
                                   f"{workflow_id} is already running (run {found.run_id}); not starting another")
        # Another start won the race and its run closed before this one looked (it found the email
        # sent, or failed): that run is the answer, not a second start.
        ended = found.status.name.lower() if found.status else "closed"
        return NewsletterStart(workflow_id, found.run_id, False,
                               f"{workflow_id} was started by another start and ended meanwhile (run {found.run_id}, "
                               f"{ended}); `pressroom newsletter status {email_id}` says how")
    sizes = await _sizes(email_id, settings)
    return NewsletterStart(workflow_id, handle.first_execution_run_id or handle.result_run_id or "", True,
                           f"started {workflow_id}", sizes, clip_warning(email_id, sizes) if sizes else None)


@dataclass(frozen=True)
class EmailSizes:
    """An email's HTML per segment as it is sent, and Gmail's clip warning when one is past 102 KB."""

    sizes: dict[str, int]
    warning: str | None


async def email_sizes(email_id: str, *, settings: Settings | None = None) -> EmailSizes:
    """What the dashboard shows of an email's size (as `newsletter preview` prints it); nothing sent."""
    settings = settings or get_settings()
    sizes = await _sizes(email_id, settings)
    return EmailSizes(sizes, clip_warning(email_id, sizes) if sizes else None)


async def _sizes(email_id: str, settings: Settings) -> dict[str, int]:
    """Each segment's size as the send renders it, for the start's warning; empty when its content
    cannot be rendered (the run refuses it and says why)."""
    async with database.connection(settings.require_database()) as conn:
        try:
            loaded = await load_email(conn, email_id, settings)
            return segment_sizes(loaded.content) if loaded else {}
        except ContentError:
            return {}


def _check_filter(email_id: str, recipient_filter: str | None) -> None:
    """A filter outside the grammar or its bounds is refused here, before a run is started for it."""
    try:
        parse(recipient_filter)
    except FilterError as error:
        raise BadInput(f"email {email_id}: {error}") from None


@dataclass(frozen=True)
class NewsletterCancel:
    email_id: str
    status: str  # cancelling (its run stops between batches) | cancelled | submitted (too late)
    by: str | None
    at: object  # datetime of the cancel, None while its run has not recorded it
    message: str


def operator_name() -> str:
    """Who cancels, when not told: the operator's login on this machine."""
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 (getpass raises whatever the platform's lookup raises)
        return "an operator"


@tracing.traced("pressroom newsletter cancel", "email_id")
async def cancel_newsletter(email_id: str, *, by: str | None = None, wait: bool = False, client=None,
                            settings: Settings | None = None) -> NewsletterCancel:
    """Stop the email's send between batches, or keep an unsent email from going out; safe to repeat.

    A running send is signalled: batches in flight finish, none starts after, and the run records
    the email `cancelled` with who and when (batches already accepted stay accepted and counted).
    An email no run is sending is recorded cancelled here. `wait` follows the run until it has.
    """
    entity_id(email_id, "email")
    settings = settings or get_settings()
    by = await _operator(by, settings)
    workflow_id = newsletter_workflow_id(email_id)
    client = client or await temporal_client(settings)
    async with database.connection(settings.require_database()) as conn:
        for _ in range(3):  # a send that starts between the read and the write is signalled instead
            email = await conn.fetchrow("SELECT status, cancelled_by, cancelled_at FROM emails WHERE id = $1",
                                        email_id)
            if email is None:
                raise NotFound(f"email {email_id} does not exist")
            if email["status"] == "cancelled":
                return NewsletterCancel(email_id, "cancelled", email["cancelled_by"], email["cancelled_at"],
                                        f"email {email_id} was cancelled by {email['cancelled_by']} at "
                                        f"{when(email['cancelled_at'])}")
            if email["status"] == "submitted":
                raise BadInput(f"email {email_id} was already sent to every recipient; there is nothing to cancel")
            handle = client.get_workflow_handle_for(SendNewsletterWorkflow.run, workflow_id)
            if await running(handle):
                await handle.signal(SendNewsletterWorkflow.cancel, CancelSendInput(by=by))
                if wait:
                    return await _cancelled_by_run(conn, email_id, handle)
                return NewsletterCancel(email_id, "cancelling", by, None,
                                        f"cancelling {workflow_id}: batches in flight finish, no other starts; "
                                        f"`pressroom newsletter status {email_id}` shows when it has stopped")
            row = await conn.fetchrow(
                "UPDATE emails SET status = 'cancelled', cancelled_by = $2, cancelled_at = now(), locked_by = NULL, "
                "error = 'The email was cancelled by ' || $2 || ' before its send: nothing more is sent.', "
                "updated_at = now() WHERE id = $1 AND status IN ('pending', 'failed') RETURNING cancelled_at",
                email_id, by)
            if row is not None:
                return NewsletterCancel(email_id, "cancelled", by, row["cancelled_at"],
                                        f"email {email_id} cancelled: it will not be sent")
    raise PressroomError(f"email {email_id} changed while it was being cancelled three times; try again")


class NewsletterResumed(BaseModel):
    """What `newsletter resume` did: the send goes on (`resumed`), or was not paused (`not-paused`)."""

    email_id: str
    status: str  # resumed | not-paused
    by: str
    message: str


@tracing.traced("pressroom newsletter resume", "email_id")
async def resume_newsletter(email_id: str, *, by: str | None = None, client=None,
                            settings: Settings | None = None) -> NewsletterResumed:
    """Go on with a send that paused itself for its early bounce or complaint rate; it is not paused
    for them again. Safe to repeat; an email that is not paused is left as it is."""
    entity_id(email_id, "email")
    settings = settings or get_settings()
    by = await _operator(by, settings)
    async with database.connection(settings.require_database()) as conn:
        email = await conn.fetchrow("SELECT status, paused_reason FROM emails WHERE id = $1", email_id)
    if email is None:
        raise NotFound(f"email {email_id} does not exist")
    if email["paused_reason"] is None or email["status"] != "submitting":
        return NewsletterResumed(email_id=email_id, status="not-paused", by=by,
                                 message=f"email {email_id} is {email['status']}, not paused: nothing to resume")
    client = client or await temporal_client(settings)
    handle = client.get_workflow_handle_for(SendNewsletterWorkflow.run, newsletter_workflow_id(email_id))
    if not await running(handle):
        raise PressroomError(f"email {email_id} says it is paused but no run is sending it; "
                             f"`pressroom newsletter status {email_id}` says what happened")
    await handle.signal(SendNewsletterWorkflow.resume_paused, ResumePausedInput(by=by))
    return NewsletterResumed(email_id=email_id, status="resumed", by=by,
                             message=f"resumed {email_id} (paused for {email['paused_reason']}): the rest goes out "
                                     "and its rates no longer pause it")


# Who cancelled or resumed, when given as an address that is no staff member's: the address is not kept.
UNRECORDED_ADDRESS = "an operator (address not recorded)"


async def _operator(by: str | None, settings: Settings) -> str:
    """Who, as the run's history and the email's row record it: a name as given, or for an address
    (the run's history never holds one) the staff member's id, as the dashboard records it."""
    by = (by or operator_name()).strip()
    if not by or len(by) > 200 or not by.isprintable():
        raise BadInput("--by must be 1 to 200 printable characters")
    if "@" not in by:
        return by
    async with database.connection(settings.require_database()) as conn:
        staff_id = await conn.fetchval("SELECT id FROM staff WHERE lower(email) = lower($1)", by)
    return staff_id or UNRECORDED_ADDRESS


async def _cancelled_by_run(conn, email_id: str, handle) -> NewsletterCancel:
    """Wait for the run to end after a cancel; what it recorded."""
    with contextlib.suppress(WorkflowFailureError):  # the row says how it ended
        await handle.result()
    row = await conn.fetchrow("SELECT status, cancelled_by, cancelled_at, error FROM emails WHERE id = $1", email_id)
    return NewsletterCancel(email_id, row["status"], row["cancelled_by"], row["cancelled_at"],
                            row["error"] or f"email {email_id} is {row['status']}")


def not_published_yet(email_id: str, email) -> str:
    """Why the email may not be sent yet (its post is a draft or scheduled), or "": refused before
    anything is written, since its post's publication sends it."""

    post = email["post_id"]
    if email["post_status"] == "draft":
        return (f"email {email_id} is not sent: its post {post} is a draft; it goes out when the post is published "
                f"(`pressroom posts schedule {post} --at …`)")
    if email["post_status"] == "scheduled":
        due = when(email["published_at"])
        return (f"email {email_id} is not sent: its post {post} is scheduled for {due}; "
                "it goes out when the post is published")
    return ""


def progress_words(progress, *, counts: bool = True) -> str:
    """A running send's progress and what it waits for, in the words of its Web UI details; without
    `counts`, beside a line that counts the batches already (one count on the screen, not two)."""
    p = progress
    details = (f"{p.status}: {p.batches_sent}/{p.batches_total} batches sent, {p.batches_failed} failed; "
               f"{p.recipients_sent:,}/{p.recipients_total:,} recipients") if counts else p.status
    if p.confirming:
        details += (f"\n\nconfirming batch {', '.join(map(str, sorted(p.confirming)))}: Mailgun may have accepted it; "
                    "waiting for its events before sending it again")
    return as_words(f"{details}\n\n{p.message}" if p.message else details)


# How often a follower asks a run for its progress: each ask is a query the server hands to the
# worker and costs both their CPU (bench/README.md), and once a second is as often as anyone reads
# a progress bar. The run's end is seen at once whatever this is.
FOLLOW_POLL_SECONDS = 1.0


async def _ask_progress(handle):
    """The run's progress, or None when no worker answered within QUERY_TIMEOUT; another refusal
    (between two runs of a continue-as-new, before the first task) raises."""
    try:
        return await handle.query(SendNewsletterWorkflow.progress, rpc_timeout=QUERY_TIMEOUT)
    except RPCError as error:
        if is_unanswered(error):
            return None
        raise


async def follow_newsletter(workflow_id: str, *, client=None, on_progress=None,
                            poll_seconds: float = FOLLOW_POLL_SECONDS,
                            say=lambda message: None, on_waiting=lambda words: None):
    """Query the run's progress until it ends; returns its outcome (following continue-as-new).

    A closed run answers at once from its history (no worker needed). While it runs, says (through
    `say`) when no worker polls its task queue or none answers, and keeps waiting; `on_waiting`
    gets what the run waits for, in words (None while it just sends).
    """
    client = client or await temporal_client()
    handle = client.get_workflow_handle_for(SendNewsletterWorkflow.run, workflow_id)
    try:
        description = await handle.describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise NotFound(f"{workflow_id} was never started") from None
        raise
    try:
        if description.status != WorkflowExecutionStatus.RUNNING:
            return await handle.result()
        result = asyncio.ensure_future(handle.result())
        unanswered = 0
        try:
            async with watching_for_worker(client, description.task_queue, say):
                while not result.done():
                    try:
                        progress = await _ask_progress(handle)
                    except Exception:  # noqa: BLE001 (a progress query refused or unanswered is asked again)
                        progress = False  # between two runs of a continue-as-new, or before the first task
                    if progress:
                        if unanswered >= 2:
                            say(f"a worker is answering again on task queue {description.task_queue}")
                        unanswered = 0
                        if on_progress:
                            on_progress(progress)
                        on_waiting(progress.message or (f"confirming batch {', '.join(map(str, progress.confirming))}"
                                                        if progress.confirming else None))
                    elif progress is None and not result.done():
                        unanswered += 1
                        if unanswered == 2:  # twice, so that one slow answer on a loaded machine is not a death
                            say(no_answer_message(description.task_queue))
                        if unanswered >= 2:
                            timer = await open_timer(client, workflow_id)
                            on_waiting("no worker is answering" + (f"; {timer}" if timer else ""))
                    await asyncio.wait([result], timeout=poll_seconds)
            return result.result()
        finally:
            result.cancel()
    except WorkflowFailureError as error:
        raise PressroomError(f"{workflow_id} failed: {cause_of(error).message}") from None


async def newsletter_status(email_id: str, *, client=None, settings: Settings | None = None,
                            command_started: float | None = None) -> NewsletterStatus:
    """The email's row, its batches and recipients, and its run: while it runs, its live progress
    when a worker answers, and in any case what it waits for (`waiting_for`).

    PostgreSQL's view always comes first; everything asked of Temporal shares one bound (what is
    left of the command's budget, STATUS_BUDGET_SECONDS in operations/waiting.py), past which the
    answer says so (`temporal`) instead of waiting on the SDK's retries. Whether a worker polls and
    answers is decided here, once, for every form of output. `command_started` (time.monotonic()
    when the command's process started): the budget counts from then; without it (a long-lived
    caller), the queries' own bound.
    """
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        email = await conn.fetchrow(f"SELECT {SHOWN_STATUS} AS status, {SHOWN_ERROR} AS error, submitted_at, "
                                    "email_count_expected, skipped_recipients, cancelled_by, cancelled_at "
                                    "FROM emails e WHERE id = $1", email_id)
        if email is None:
            raise NotFound(f"email {email_id} does not exist")
        batches = await batch_counts(conn, email_id)  # as the run, its cancel and its finish count them
        recipients = await conn.fetchval("SELECT count(*) FROM email_recipients WHERE email_id = $1", email_id)
    workflow_id = newsletter_workflow_id(email_id)
    run, progress, waiting_for, temporal = await _run_view(workflow_id, client, settings, command_started)
    return NewsletterStatus.model_validate({
            "email_id": email_id, "status": email["status"], "error": email["error"],
            "submitted_at": email["submitted_at"], "workflow_id": workflow_id, "run": run, "progress": progress,
            "batches": {"total": batches.batches_total, "submitted": batches.batches_submitted,
                        "failed": batches.batches_failed},
            "recipients": recipients, "recipients_expected": email["email_count_expected"],
            "waiting_for": waiting_for, "skipped_recipients": email["skipped_recipients"],
            "cancelled_by": email["cancelled_by"], "cancelled_at": email["cancelled_at"], "temporal": temporal})


async def _run_view(workflow_id: str, client, settings: Settings, command_started: float | None = None):
    """(run, progress, waiting_for, temporal) within the status budget in all: `temporal` is None when
    Temporal answered, else why it could not be read (then the run is unknown: None)."""
    bound = status_query_seconds(None if command_started is None else time.monotonic() - command_started)
    deadline = time.monotonic() + bound

    async def bounded(call, default=None):
        """The call's answer, or `default` past the shared deadline."""
        left = deadline - time.monotonic()
        if left <= 0:
            return default
        try:
            return await asyncio.wait_for(call, left)
        except TimeoutError:
            return default

    unreachable = (f"Temporal at {settings.temporal_address} did not answer within "
                   f"{bound:.2g} s; shown is what PostgreSQL holds")
    try:
        if client is None:
            client = await bounded(temporal_client(settings))
            if client is None:
                return None, None, None, unreachable
        handle = client.get_workflow_handle_for(SendNewsletterWorkflow.run, workflow_id)
        description = await bounded(handle.describe(rpc_timeout=timedelta(seconds=bound)))
        if description is None:
            return None, None, None, unreachable
    except TemporalUnavailable as error:
        return None, None, None, f"{error}; shown is what PostgreSQL holds"
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return None, None, None, None
        return None, None, None, f"{describe_rpc_error(error, settings)}; shown is what PostgreSQL holds"
    status = description.status.name.lower() if description.status else None
    run = {"run_id": description.run_id, "status": status, "task_queue": description.task_queue,
           "worker_polling": None, "worker_answering": None, "query_seconds": round(bound, 1)}
    if status != "running":
        return run, None, None, None

    async def ask():
        try:
            return await _ask_progress(handle)
        except Exception:  # noqa: BLE001 (a progress query refused or unanswered is no answer)
            return False  # refused (before the first task): neither an answer nor a silence

    polling, answer, timer = await asyncio.gather(
        bounded(has_worker(client, description.task_queue)), bounded(ask()), bounded(open_timer(client, workflow_id)))
    run["worker_polling"] = polling
    run["worker_answering"] = False if polling is False else (
        True if answer else None if answer is False else False)  # None: unanswered within the bound
    waiting_for = _waiting_words(answer or None, timer, run, retrying(description))
    return run, answer.model_dump() if answer else None, waiting_for, None


def retrying(description) -> str | None:
    """An activity of the run being retried after a failure, in words (the last step retrying a
    database error is waiting too), or None."""

    for pending in description.raw_description.pending_activities:
        if pending.attempt > 1 and pending.HasField("last_failure"):
            words = (f"{pending.activity_type.name} to succeed: attempt {pending.attempt} after "
                     f"{pending.last_failure.message.splitlines()[0] if pending.last_failure.message else 'a failure'}")
            if pending.HasField("next_attempt_schedule_time"):
                at = pending.next_attempt_schedule_time.ToDatetime(UTC)
                words += f" (next attempt at {at:%Y-%m-%d %H:%M:%S} UTC)"
            return words
    return None


def _waiting_words(progress, timer: str | None, run: dict, retried: str | None = None) -> str | None:
    """What a running send waits for, in the Web UI's words: a worker, a retried step, a cap, a
    batch's events."""
    if run["worker_polling"] is False:
        return "no worker is polling its task queue" + (f"; {timer}" if timer else "")
    if run["worker_answering"] is False:
        return "no worker is answering" + (f"; {timer}" if timer else "")
    if progress and progress.message:
        return progress.message
    if retried:
        return retried
    return timer  # "confirming batch N until T", or None while it just sends


@dataclass(frozen=True)
class EmailPreview:
    subject: str
    html: str
    text: str
    reader: str  # who the preview is for, in words
    sizes: Mapping[str, int] = field(default_factory=dict)  # each segment's HTML in bytes
    warning: str | None = None  # why Gmail would clip it, when it would


STAND_IN_UUID = "00000000-0000-0000-0000-000000000000"  # a reader who is no member: fallbacks show


async def _render_for(conn, email_id: str, *, member_id: str | None, segment: str | None, address: str | None,
                      settings: Settings, track_clicks: bool = True):
    """(loaded email, rendering, reader's values, reader in words): what a member or a stand-in gets;
    links untracked when not `track_clicks` (a test copy's clicks count nowhere)."""
    if member_id is not None and segment is not None:
        raise BadInput("give --member or --segment, not both")
    if segment is not None and segment not in SEGMENT_NAMES:
        raise BadInput(f"segment {segment!r} is not one of {', '.join(SEGMENT_NAMES)}")
    try:
        loaded = await load_email(conn, email_id, settings)
    except ContentError as error:
        raise BadInput(str(error)) from None
    if loaded is None:
        raise NotFound(f"email {email_id} does not exist")
    if member_id is None and address is not None and segment is None:
        member_id = await conn.fetchval("SELECT id FROM members WHERE lower(email) = lower($1)", address)
    try:
        if member_id is not None:
            found = await load_member_values(conn, member_id, loaded, settings)
            if found is None:
                raise NotFound(f"member {member_id} does not exist")
            values, status = found
            of_tier = await entitled(conn, member_id, email_id)
            reader = f"member {member_id} ({status}" + (", of the post's tiers)" if of_tier else ")")
        else:
            status = "free" if segment == "free" else "paid"
            values = member_values(name=None, email=address or "reader@example.com", uuid=STAND_IN_UUID,
                                   status=status, site_url=settings.site_url,
                                   link_secret=settings.require_members_link_secret(),
                                   newsletter_uuid=loaded.newsletter_uuid, email_id=email_id)
            # The default reader reads everything, as on a paid post; a chosen segment is of no tier.
            of_tier = segment is None
            reader = f"a {status} reader with no name"
        content = loaded.content if track_clicks else dataclasses.replace(loaded.content, track_clicks=False)
        rendered = render(content, segment_for(content, status, of_tier=of_tier))
    except ContentError as error:
        raise BadInput(str(error)) from None
    return loaded, rendered, values, reader


async def preview_email(email_id: str, *, member_id: str | None = None, segment: str | None = None,
                        settings: Settings | None = None) -> EmailPreview:
    """What a member (or a stand-in reader of a segment, paid by default) receives; nothing is sent."""
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        if member_id is not None:  # by id or address, as `members show`
            member_id = (await _member_row(conn, member_id))["id"]
        loaded, rendered, values, reader = await _render_for(conn, email_id, member_id=member_id, segment=segment,
                                                             address=None, settings=settings)
    subject, html, text = rendered.personalise(values)
    sizes = segment_sizes(loaded.content)  # _render_for rendered one segment: the others render as well
    return EmailPreview(subject=subject, html=html, text=text, reader=reader, sizes=sizes,
                        warning=clip_warning(email_id, sizes))


async def send_test_email(email_id: str, to: str, *, segment: str | None = None,
                          settings: Settings | None = None) -> str:
    """One copy to `to`, subject "[TEST] …", untracked; the email, its batches and statistics are untouched.

    The copy is personalised as the member with that address when there is one, else as a reader with
    no name; it carries no email id, so analytics never counts its events.
    """
    to = email_address(to)
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        loaded, rendered, values, _ = await _render_for(conn, email_id, member_id=None, segment=segment,
                                                        address=to, settings=settings, track_clicks=False)
    if not loaded.from_address:
        raise BadInput(no_sender(email_id, loaded.newsletter_slug))
    values = {**values, "email": to}
    provider = provider_from_settings(settings)
    try:
        message = provider.prepare(Message(
            from_address=loaded.from_address, subject=f"[TEST] {rendered.subject}", html=rendered.html,
            text=rendered.text, tags=["test-email"], headers={"Reply-To": loaded.reply_to},
            tracking_opens=False, tracking_clicks=False))
        sent = await provider.send(message, {to: rendered.recipient_variables(values)}, mark={},
                                   message_id=provider.message_id(f"test-{uuid.uuid4().hex}"))
        return sent.provider_id
    except ProviderError as error:
        raise PressroomError(f"the test email was not sent: {error}") from None
    finally:
        await provider.aclose()

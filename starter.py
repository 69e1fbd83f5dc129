"""The `pressroom` command line: parse, call a starter function, print.

Starter functions take an optional Temporal client so that tests call them with theirs. Every
command has --help; every error is one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from typing import Awaitable, TypeVar

import typer
from rich.console import Console

from pressroom.errors import BadInput, NotFound, PressroomError, shorten
from pressroom.inputs import entity_id
from pressroom.settings import Settings, dev_stack_file, get_settings

app = typer.Typer(help="Pressroom: durable background jobs for newsletter publishing, on Temporal.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
console = Console()
T = TypeVar("T")

def run_async(work: Awaitable[T]) -> T:
    return asyncio.run(work)


async def temporal_client(settings: Settings | None = None):
    from pressroom.temporal import connect

    return await connect(settings or get_settings())


# --- development stack -------------------------------------------------------------------------

dev_app = typer.Typer(help="The local development stack: PostgreSQL, Temporal with its Web UI, a Mailgun simulator.",
                      no_args_is_help=True)
app.add_typer(dev_app, name="dev")


@dev_app.command("up")
def dev_up() -> None:
    """Start what is not configured (data is kept in ./.pressroom between runs)."""
    from devstack import stack

    async def work():
        status = stack.up()
        settings = get_settings()
        await migrate_database(settings)
        return status

    status = run_async(work())
    for name in status.started:
        console.print(f"started  {name}")
    for name in status.running:
        console.print(f"running  {name} (already)")
    for name in status.external:
        console.print(f"external {name} (configured by its variable)")
    if "temporal_ui" in status.values:
        console.print(f"\nTemporal Web UI: [bold]{status.values['temporal_ui']}[/bold]")
    console.print(f"\nThe stack is recorded in {dev_stack_file()}; pressroom commands use it for unset variables.",
                  highlight=False)
    console.print('To use it from other programs: eval "$(pressroom dev env)"')


# The variables a program needs to use the running stack, as `pressroom dev env` prints them.
STACK_VARIABLES = (("DATABASE_URL", "database_url"), ("TEMPORAL_ADDRESS", "temporal_address"),
                   ("MAILGUN_BASE_URL", "mailgun_base_url"), ("MAILGUN_DOMAIN", "mailgun_domain"),
                   ("MAILGUN_API_KEY", "mailgun_api_key"))


@dev_app.command("env")
def dev_env() -> None:
    """Print `export` lines for the running stack (the simulator's local key included)."""
    import shlex

    from pressroom.settings import read_dev_stack

    state = read_dev_stack()
    if not state:
        raise PressroomError("the development stack is not running (start it with `pressroom dev up`)")
    for variable, key in STACK_VARIABLES:
        if key in state:
            print(f"export {variable}={shlex.quote(str(state[key]))}")


@dev_app.command("down")
def dev_down() -> None:
    """Stop the development stack (its data stays for the next `dev up`)."""
    from devstack import stack

    stopped = stack.down()
    console.print("stopped " + ", ".join(stopped) if stopped else "nothing was running")


# --- schema ------------------------------------------------------------------------------------

async def migrate_database(settings: Settings) -> list[str]:
    from pressroom import database

    return await database.migrate(settings.require_database())


@app.command()
def migrate() -> None:
    """Apply the schema migrations not yet applied (safe to run from several processes at once)."""
    applied = run_async(migrate_database(get_settings()))
    console.print(f"applied {', '.join(applied)}" if applied else "the schema is up to date")


# --- worker ------------------------------------------------------------------------------------

@app.command()
def worker() -> None:
    """Run a worker on the task queue until SIGINT or SIGTERM."""
    import worker as worker_module

    worker_module.configure_logging(get_settings())
    run_async(worker_module.run())


# --- newsletter --------------------------------------------------------------------------------

@dataclass(frozen=True)
class NewsletterStart:
    workflow_id: str
    run_id: str
    started: bool  # False: an existing run was found, and `message` says which
    message: str


async def start_newsletter(email_id: str, *, client=None, settings: Settings | None = None) -> NewsletterStart:
    """Start the send of an email, or find the run that already sends or sent it."""
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.common import WorkflowIDConflictPolicy
    from temporalio.exceptions import WorkflowAlreadyStartedError
    from temporalio.service import RPCError

    from pressroom import database
    from workflows.newsletter import SendNewsletterInput, SendNewsletterWorkflow, newsletter_workflow_id

    entity_id(email_id, "email")
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        status = await conn.fetchval("SELECT status FROM emails WHERE id = $1", email_id)
    if status is None:
        raise NotFound(f"email {email_id} does not exist")
    client = client or await temporal_client(settings)
    workflow_id = newsletter_workflow_id(email_id)
    if status == "submitted":
        try:
            last = await client.get_workflow_handle(workflow_id).describe()
            by = f" by run {last.run_id} ({last.status.name.lower() if last.status else 'unknown'})"
        except RPCError:
            by = ""
        return NewsletterStart(workflow_id, "", False, f"email {email_id} was already sent{by}; nothing to send")
    try:
        handle = await client.start_workflow(
            SendNewsletterWorkflow.run, SendNewsletterInput(email_id=email_id), id=workflow_id,
            task_queue=settings.task_queue, id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            static_summary=f"Send email {email_id} to its newsletter's members")
    except WorkflowAlreadyStartedError as error:
        running = await client.get_workflow_handle(workflow_id).describe()
        if running.status == WorkflowExecutionStatus.RUNNING:
            return NewsletterStart(workflow_id, error.run_id or running.run_id, False,
                                   f"{workflow_id} is already running (run {running.run_id}); not starting another")
        raise
    return NewsletterStart(workflow_id, handle.first_execution_run_id or handle.result_run_id or "", True,
                           f"started {workflow_id}")


async def follow_newsletter(workflow_id: str, *, client=None, on_progress=None, poll_seconds: float = 0.5):
    """Query the run's progress until it ends; returns its outcome (following continue-as-new)."""
    from temporalio.client import WorkflowFailureError
    from temporalio.service import RPCError

    from workflows.newsletter import SendNewsletterWorkflow

    client = client or await temporal_client()
    handle = client.get_workflow_handle_for(SendNewsletterWorkflow.run, workflow_id)
    result = asyncio.ensure_future(handle.result())
    try:
        while not result.done():
            try:
                progress = await handle.query(SendNewsletterWorkflow.progress)
                if on_progress:
                    on_progress(progress)
            except RPCError:
                pass  # between two runs of a continue-as-new, or before the first task: ask again
            await asyncio.wait([result], timeout=poll_seconds)
        return result.result()
    except WorkflowFailureError as error:
        cause = error.cause
        raise PressroomError(f"{workflow_id} failed: {getattr(cause, 'message', None) or cause or error}") from None
    finally:
        result.cancel()


newsletter_app = typer.Typer(help="Send newsletters: one durable run per email.", no_args_is_help=True)
app.add_typer(newsletter_app, name="newsletter")


@newsletter_app.command("send")
def newsletter_send(email_id: str = typer.Argument(..., help="The email to send (emails.id)."),
                    wait: bool = typer.Option(False, "--wait", help="Follow the send with a progress bar.")) -> None:
    """Send an email to every recipient, once; a second start finds the first run."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    async def work():
        client = await temporal_client()
        start = await start_newsletter(email_id, client=client)
        console.print(start.message, highlight=False)
        if not wait or (not start.started and not start.run_id):
            return None
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("batches · {task.fields[recipients]} recipients"), TimeElapsedColumn(),
                      console=console) as bar:
            task = bar.add_task(f"email {email_id}", total=None, recipients="0")

            def show(progress) -> None:
                bar.update(task, total=progress.batches_total or None, completed=progress.batches_sent
                           + progress.batches_failed,
                           recipients=f"{progress.recipients_sent:,}/{progress.recipients_total:,}")

            outcome = await follow_newsletter(start.workflow_id, client=client, on_progress=show)
            if outcome.counts:
                c = outcome.counts
                bar.update(task, total=c.batches_total, completed=c.batches_submitted + c.batches_failed,
                           recipients=f"{c.recipients_submitted:,}/{c.recipients_total:,}")
            return outcome

    outcome = run_async(work())
    if outcome is not None:
        console.print(f"email {email_id}: {outcome.status}" + (f" — {outcome.message}" if outcome.message else ""),
                      highlight=False)
        if outcome.status == "failed":
            raise PressroomError(f"email {email_id} failed: {outcome.message}")

# --- outbox and members ------------------------------------------------------------------------

members_app = typer.Typer(help="Members of the site.", no_args_is_help=True)
app.add_typer(members_app, name="members")
outbox_app = typer.Typer(help="The outbox: events delivered with retries and an idempotency ledger.",
                         no_args_is_help=True)
app.add_typer(outbox_app, name="outbox")


@dataclass(frozen=True)
class MemberAdded:
    member_id: str
    welcome_key: str | None  # the outbox entry of the welcome email, when one was enqueued


async def add_member(email: str, name: str | None = None, *, status: str = "free",
                     settings: Settings | None = None) -> MemberAdded:
    """The member and its MemberCreatedEvent in one transaction: both commit, or neither."""
    import asyncpg

    from activities.outbox import enqueue
    from pressroom import database

    from pressroom.inputs import email_address, free_text

    email, name = email_address(email), free_text(name, "name")
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        async with conn.transaction():
            try:
                member_id = await conn.fetchval(
                    "INSERT INTO members (email, name, status) VALUES ($1, $2, $3) RETURNING id", email, name, status)
            except asyncpg.UniqueViolationError:
                raise BadInput("a member with that address already exists") from None
            await conn.execute("INSERT INTO members_newsletters (member_id, newsletter_id) "
                               "SELECT $1, id FROM newsletters WHERE subscribe_on_signup AND status = 'active'",
                               member_id)
            key = None
            # Seed 000: the welcome email goes to free signups, and only when the setting is on.
            if settings.welcome_emails and status == "free":
                key = await enqueue(conn, "MemberCreatedEvent", {"member_id": member_id},
                                    idempotency_key=f"member-created-{member_id}")
    return MemberAdded(member_id, key)


@members_app.command("add")
def members_add(email: str = typer.Argument(..., help="The member's e-mail address."),
                name: str = typer.Option(None, "--name", help="The member's name.")) -> None:
    """Add a free member; their welcome email goes out through the outbox."""
    added = run_async(add_member(email, name))
    console.print(f"member {added.member_id} added" + (f"; welcome email queued (outbox-{added.welcome_key})"
                                                        if added.welcome_key else ""), highlight=False)


async def outbox_status(settings: Settings | None = None) -> dict:
    from pressroom import database

    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        counts = {r["status"]: r["n"] for r in await conn.fetch(
            "SELECT status, count(*) AS n FROM outbox GROUP BY status ORDER BY status")}
        oldest = await conn.fetchval("SELECT extract(epoch FROM now() - min(created_at)) FROM outbox "
                                     "WHERE status IN ('pending', 'failed')")
    return {"counts": counts, "oldest_pending_seconds": float(oldest) if oldest is not None else None}


async def outbox_entry(outbox_id: str, settings: Settings | None = None) -> dict:
    from pressroom import database

    entity_id(outbox_id, "outbox entry")
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        row = await conn.fetchrow(
            "SELECT o.id, o.event_type, o.idempotency_key, o.status, o.attempts, o.next_run_at, o.last_error_code, "
            "o.last_error_msg, o.created_at, o.dispatched_at, o.processed_at, l.status AS ledger "
            "FROM outbox o LEFT JOIN idempotency_ledger l USING (idempotency_key) WHERE o.id = $1", outbox_id)
    if row is None:
        raise NotFound(f"outbox entry {outbox_id} does not exist")
    return dict(row)


async def requeue_outbox_entry(outbox_id: str, settings: Settings | None = None) -> None:
    """aborted → pending with attempts reset, and its failed ledger line cleared, so it is tried afresh."""
    from pressroom import database

    entity_id(outbox_id, "outbox entry")
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        async with conn.transaction():
            status = await conn.fetchval("SELECT status FROM outbox WHERE id = $1 FOR UPDATE", outbox_id)
            if status is None:
                raise NotFound(f"outbox entry {outbox_id} does not exist")
            if status != "aborted":
                raise BadInput(f"outbox entry {outbox_id} is {status}; only an aborted entry can be requeued")
            await conn.execute(
                "DELETE FROM idempotency_ledger WHERE status = 'failed' AND idempotency_key = "
                "(SELECT idempotency_key FROM outbox WHERE id = $1)", outbox_id)
            await conn.execute(
                "UPDATE outbox SET status = 'pending', attempts = 0, next_run_at = now(), last_error_code = NULL, "
                "last_error_msg = NULL, processed_at = NULL, updated_at = now() WHERE id = $1", outbox_id)
            await conn.execute("SELECT pg_notify('pressroom_outbox', '')")


@outbox_app.command("status")
def outbox_status_command() -> None:
    """Counts by state and the age of the oldest entry waiting."""
    status = run_async(outbox_status())
    for state, count in status["counts"].items():
        console.print(f"{state:<11} {count:>8,}", highlight=False)
    oldest = status["oldest_pending_seconds"]
    console.print("nothing waiting" if oldest is None else f"oldest waiting entry: {oldest:,.1f} s old")


@outbox_app.command("show")
def outbox_show(outbox_id: str = typer.Argument(..., help="The outbox entry (outbox.id).")) -> None:
    """One entry: its state, attempts and last error."""
    for field, value in run_async(outbox_entry(outbox_id)).items():
        console.print(f"{field:<16} {'' if value is None else value}", highlight=False, soft_wrap=True)


@outbox_app.command("requeue")
def outbox_requeue(outbox_id: str = typer.Argument(..., help="The aborted outbox entry (outbox.id).")) -> None:
    """Try an aborted entry again from the start (its attempts are reset)."""
    run_async(requeue_outbox_entry(outbox_id))
    console.print(f"outbox entry {outbox_id} is pending again", highlight=False)

# --- analytics ---------------------------------------------------------------------------------

analytics_app = typer.Typer(help="Email analytics: the schedule that fetches Mailgun events into statistics.",
                            no_args_is_help=True)
app.add_typer(analytics_app, name="analytics")


def parse_moment(text: str, option: str):
    """An ISO 8601 time with its offset from 2000 on (pressroom/inputs.py), else one-line BadInput."""
    from pressroom.inputs import moment

    return moment(text, option)


async def analytics_schedule(settings: Settings | None = None, client=None) -> str:
    """Create or update the `email-analytics` schedule; answers "created" or "updated"."""
    from activities.analytics import ensure_schedule

    settings = settings or get_settings()
    return await ensure_schedule(client or await temporal_client(settings), settings)


async def _analytics_handle(settings: Settings | None, client):
    from temporalio.service import RPCError, RPCStatusCode

    from activities.analytics import SCHEDULE_ID
    from pressroom.errors import NotFound

    client = client or await temporal_client(settings or get_settings())
    handle = client.get_schedule_handle(SCHEDULE_ID)
    try:
        return handle, await handle.describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise NotFound(f"schedule {SCHEDULE_ID} does not exist (create it with `pressroom analytics schedule`)") \
                from None
        raise


async def analytics_trigger(settings: Settings | None = None, client=None) -> None:
    """Start one run now (skipped by the overlap policy if one is running)."""
    handle, _ = await _analytics_handle(settings, client)
    await handle.trigger()


async def analytics_pause(paused: bool, settings: Settings | None = None, client=None) -> None:
    handle, _ = await _analytics_handle(settings, client)
    if paused:
        await handle.pause(note="paused with pressroom analytics pause")
    else:
        await handle.unpause(note="unpaused with pressroom analytics unpause")


async def analytics_backfill(begin: str, end: str, settings: Settings | None = None) -> str:
    """Record a backfill request that the next run reads; answers its job name."""
    import json
    import uuid

    from activities.analytics import BACKFILL_PREFIX
    from pressroom import database
    from pressroom.errors import BadInput

    from pressroom.inputs import past_time

    # A window in the future has no events yet: the run would mark it finished, empty.
    start, stop = past_time(begin, "--from"), past_time(end, "--to")
    if start >= stop:
        raise BadInput(f"--from {shorten(begin)!r} must come before --to {shorten(end)!r}")
    settings = settings or get_settings()
    name = f"{BACKFILL_PREFIX}{uuid.uuid4().hex[:12]}"
    pool = await database.connect(settings.require_database(), max_size=1)
    try:
        await pool.execute("INSERT INTO jobs (name, status, metadata) VALUES ($1, 'queued', $2::jsonb)", name,
                           json.dumps({"begin": start.timestamp(), "end": stop.timestamp()}))
    finally:
        await pool.close()
    return name


async def analytics_status(settings: Settings | None = None, client=None) -> dict:
    """The schedule's state, its recent actions, each cursor with its lag, and the last runs."""
    import json
    from datetime import datetime, timezone

    from activities.analytics import PHASE_JOBS, RUNS_JOB
    from pressroom import database

    settings = settings or get_settings()
    _, description = await _analytics_handle(settings, client)
    state = description.schedule.state
    now = datetime.now(timezone.utc)
    status = {"paused": state.paused, "note": state.note or "",
              "next": [t.isoformat() for t in description.info.next_action_times[:3]],
              "recent": [{"at": a.started_at.isoformat(), "workflow_id": a.action.workflow_id}
                         for a in description.info.recent_actions[-5:]],
              "running": [a.workflow_id for a in description.info.running_actions],
              "cursors": {}, "runs": [], "backfills": []}
    pool = await database.connect(settings.require_database(), max_size=1)
    try:
        for row in await pool.fetch("SELECT name, status, metadata FROM jobs WHERE name LIKE 'email-analytics%'"
                                    " ORDER BY name"):
            metadata = json.loads(row["metadata"])
            if row["name"] == RUNS_JOB:
                status["runs"] = metadata.get("runs", [])
            elif row["name"] in PHASE_JOBS.values():
                cursor = metadata.get("cursor")
                status["cursors"][row["name"]] = {
                    "cursor": datetime.fromtimestamp(cursor, timezone.utc).isoformat() if cursor else None,
                    "lag_seconds": round(now.timestamp() - cursor, 1) if cursor else None,
                    "status": row["status"]}
            if "begin" in metadata:
                status["backfills"].append({"name": row["name"], "status": row["status"]})
    finally:
        await pool.close()
    return status


@analytics_app.command("schedule")
def analytics_schedule_command() -> None:
    """Create or update the schedule `email-analytics` (safe to run again)."""
    outcome = run_async(analytics_schedule())
    console.print(f"schedule email-analytics {outcome}")


@analytics_app.command("run")
def analytics_run_command() -> None:
    """Start one analytics run now."""
    run_async(analytics_trigger())
    console.print("triggered one email-analytics run")


@analytics_app.command("pause")
def analytics_pause_command() -> None:
    """Pause the schedule (runs in progress finish)."""
    run_async(analytics_pause(True))
    console.print("schedule email-analytics paused")


@analytics_app.command("unpause")
def analytics_unpause_command() -> None:
    """Resume the schedule."""
    run_async(analytics_pause(False))
    console.print("schedule email-analytics unpaused")


@analytics_app.command("backfill")
def analytics_backfill_command(
        begin: str = typer.Option(..., "--from", help="ISO 8601 with offset, e.g. 2026-11-01T00:00:00+00:00"),
        end: str = typer.Option(..., "--to", help="ISO 8601 with offset")) -> None:
    """Ask the next runs to re-read Mailgun's events between two times."""
    name = run_async(analytics_backfill(begin, end))
    console.print(f"backfill recorded as {name}; the next run reads it")


@analytics_app.command("status")
def analytics_status_command() -> None:
    """The schedule's state, the last runs, the cursors and their lag."""
    print_analytics_status(run_async(analytics_status()))


def print_analytics_status(status: dict, console: Console = console) -> None:
    """`analytics status` as lines: schedule, next run, cursors with lag, backfills, the last runs."""
    console.print(f"schedule email-analytics: {'paused' if status['paused'] else 'active'}"
                  f"{' (' + status['note'] + ')' if status['note'] else ''}", highlight=False)
    if status["next"]:
        console.print(f"next run: {status['next'][0]}", highlight=False)
    for name in status["running"]:
        console.print(f"running: {name}", highlight=False)
    for name, cursor in status["cursors"].items():
        console.print(f"cursor {name}: {cursor['cursor']} (lag {cursor['lag_seconds']} s)", highlight=False)
    for backfill in status["backfills"]:
        console.print(f"backfill {backfill['name']}: {backfill['status']}", highlight=False)
    for run in status["runs"][:5]:
        counts = {}
        for phase in run["phases"]:
            for kind, n in phase["by_type"].items():
                counts[kind] = counts.get(kind, 0) + n
        console.print(f"run {run['started_at']}: {sum(p['events'] for p in run['phases'])} events {counts}, "
                      f"{run.get('events_per_second', 0)} events/s"
                      f"{', capped' if run['capped'] else ''}{', ERROR ' + run['error'] if run['error'] else ''}",
                      highlight=False)


# --- scheduled posts ---------------------------------------------------------------------------

posts_app = typer.Typer(help="Scheduled posts: one durable timer per post.", no_args_is_help=True)
app.add_typer(posts_app, name="posts")


async def schedule_post(post_id: str, at: str, *, client=None, settings: Settings | None = None):
    """Mark the post scheduled for `at` and start or move its workflow, both or neither; a past time
    publishes at once."""
    from pressroom.inputs import publish_time

    entity_id(post_id, "post")
    publish_at = publish_time(at)
    settings = settings or get_settings()
    await change_post(post_id, publish_at, client or await temporal_client(settings), settings)
    return publish_at


async def unschedule_post(post_id: str, *, client=None, settings: Settings | None = None) -> None:
    """Back to draft, and the post's workflow ends without publishing; both or neither."""
    entity_id(post_id, "post")
    settings = settings or get_settings()
    await change_post(post_id, None, client or await temporal_client(settings), settings)


async def change_post(post_id: str, publish_at, client, settings: Settings) -> None:
    """Schedule the post for `publish_at` (None: back to draft) and tell its workflow, as one change.

    The row is updated in a transaction and the workflow told before it commits: a refused call
    rolls the row back. Should the commit fail once the workflow was told, the workflow is put
    back as the row still is. Either way the error says what happened, in one line.
    """
    from temporalio.service import RPCError

    from pressroom import database
    from pressroom.temporal import describe_rpc_error

    async with database.connection(settings.require_database()) as conn:
        transaction = conn.transaction()
        await transaction.start()
        try:
            before = await conn.fetchrow("SELECT status, published_at FROM posts WHERE id = $1 FOR UPDATE", post_id)
            if before is None:
                raise NotFound(f"post {post_id} does not exist")
            if publish_at is None and before["status"] != "scheduled":
                raise BadInput(f"post {post_id} is {before['status']}, not scheduled")
            if publish_at is not None and before["status"] not in ("draft", "scheduled"):
                raise BadInput(f"post {post_id} is already {before['status']}; only a draft or scheduled post can "
                               "be scheduled")
            await conn.execute("UPDATE posts SET status = $2, published_at = coalesce($3, published_at), "
                               "updated_at = now() WHERE id = $1", post_id,
                               "draft" if publish_at is None else "scheduled", publish_at)
            try:
                await tell_post_workflow(client, settings, post_id, publish_at)
            except RPCError as error:
                raise PressroomError(f"post {post_id} was not changed (it is still {before['status']}): "
                                     f"{describe_rpc_error(error, settings)}") from None
        except BaseException:
            try:
                await transaction.rollback()
            except Exception:
                pass  # the connection is gone, and the server rolled back with it
            raise
        try:
            await transaction.commit()
        except Exception as error:
            back = before["published_at"] if before["status"] == "scheduled" else None
            try:
                await tell_post_workflow(client, settings, post_id, back)
                repair = "its workflow was put back"
            except Exception:
                repair = "its workflow could not be put back: run `pressroom posts reconcile`"
            raise PressroomError(f"post {post_id} was not changed (it is still {before['status']}): the database "
                                 f"did not commit ({type(error).__name__}: {error}); {repair}") from None


async def tell_post_workflow(client, settings: Settings, post_id: str, publish_at) -> None:
    """Start or move the post's workflow to `publish_at`, or stop it (None)."""
    from activities.posts import start_or_move_publication, stop_publication

    if publish_at is None:
        await stop_publication(client, post_id)
    else:
        await start_or_move_publication(client, settings, post_id, publish_at)


async def reconcile_posts(*, client=None, settings: Settings | None = None):
    from activities.posts import reconcile_scheduled_posts
    from pressroom import database

    settings = settings or get_settings()
    pool = await database.connect(settings.require_database(), max_size=2)
    try:
        return await reconcile_scheduled_posts(client or await temporal_client(settings), pool, settings)
    finally:
        await pool.close()


@posts_app.command("schedule")
def posts_schedule(post_id: str = typer.Argument(..., help="The post (posts.id)."),
                   at: str = typer.Option(..., "--at", help="ISO 8601 with offset, e.g. 2026-12-01T09:00:00+01:00.")
                   ) -> None:
    """Schedule a post (or move it); a time in the past publishes it at once."""
    publish_at = run_async(schedule_post(post_id, at))
    console.print(f"post {post_id} publishes at {publish_at.isoformat()} (workflow post-publish-{post_id})",
                  highlight=False)


@posts_app.command("unschedule")
def posts_unschedule(post_id: str = typer.Argument(..., help="The post (posts.id).")) -> None:
    """Set a scheduled post back to draft; its timer ends without publishing."""
    run_async(unschedule_post(post_id))
    console.print(f"post {post_id} is a draft again", highlight=False)


@posts_app.command("reconcile")
def posts_reconcile() -> None:
    """Give every scheduled post its workflow at its time, and stop workflows of posts not scheduled."""
    result = run_async(reconcile_posts())
    console.print(f"{result.started_or_moved} scheduled posts started or moved, {result.stopped} stray timers stopped")

# --- demo and operations -----------------------------------------------------------------------

@app.command()
def demo(members: int = typer.Option(5000, "--members", min=1, max=1_000_000, help="How many members to seed."),
         publish_in: float = typer.Option(15, "--publish-in", min=0, help="Seconds until the post publishes."),
         keep_running: bool = typer.Option(False, "--keep-running", help="Keep the worker running afterwards.")
         ) -> None:
    """Everything in one minute: dev stack, a site, a welcome email, a scheduled post, its newsletter,
    analytics, and a closing table. Run it again any time; it reuses the data in ./.pressroom."""
    from pressroom.demo import run_demo

    run_async(run_demo(console, members=members, publish_in=publish_in, keep_running=keep_running))

@app.command()
def check() -> None:
    """Check the configuration and reach PostgreSQL, Temporal and Mailgun; name what is wrong."""
    from pressroom.check import run_checks

    results = run_async(run_checks(get_settings()))
    for result in results:
        mark = "[green]ok  [/green]" if result.ok else "[red]FAIL[/red]"
        console.print(f"{mark} {result.service}: {result.detail}", highlight=False, soft_wrap=True)
    failed = [result.service for result in results if not result.ok]
    if failed:
        raise PressroomError(f"{', '.join(failed)} {'is' if len(failed) == 1 else 'are'} not ready (see above)")


temporal_app = typer.Typer(help="Prepare a Temporal namespace for Pressroom.", no_args_is_help=True)
app.add_typer(temporal_app, name="temporal")


@temporal_app.command("setup")
def temporal_setup() -> None:
    """Register Pressroom's search attributes (EmailId, PostId, PublishAt, OutboxEventType).

    For a self-hosted cluster; the dev stack does this itself. On Temporal Cloud, add them in the
    Cloud UI or with `tcld namespace search-attributes add`.
    """
    from pressroom.temporal import register_search_attributes

    async def work():
        return await register_search_attributes(await temporal_client())

    added = run_async(work())
    console.print(f"registered {', '.join(added)}" if added else "every search attribute is already registered")


@app.command("codec-server")
def codec_server(
    port: int = typer.Option(8081, help="Port to listen on."),
    host: str = typer.Option("127.0.0.1", help="Address to bind; keep it private."),
    ui_origin: str = typer.Option("http://localhost:8233", help="The Web UI's origin, allowed by CORS."),
    new_key: bool = typer.Option(False, "--new-key", help="Print a fresh key entry for PRESSROOM_ENCRYPTION_KEY "
                                                          "and exit."),
) -> None:
    """Serve /decode and /encode so the Web UI shows encrypted histories in clear."""
    from pressroom.codec import EncryptionCodec, new_key_entry
    from pressroom.codec_server import serve

    if new_key:
        console.print(new_key_entry(), highlight=False)
        return
    settings = get_settings()
    if not settings.encryption_key.get_secret_value():
        raise PressroomError("PRESSROOM_ENCRYPTION_KEY is not set: there is nothing to decode "
                             "(make a key with `pressroom codec-server --new-key`)")

    async def work():
        codec = EncryptionCodec.from_text(settings.encryption_key.get_secret_value())
        runner = await serve(codec, host=host, port=port, ui_origin=ui_origin.rstrip("/"),
                             token=settings.codec_token.get_secret_value())
        console.print(f"codec server on http://{host}:{port} for the Web UI at {ui_origin} "
                      "(set it as the UI's codec endpoint)", highlight=False)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        run_async(work())
    except OSError as error:
        raise PressroomError(f"the codec server cannot listen on {host}:{port}: {error.strerror}") from None


def main(args: list[str] | None = None) -> None:
    """Run the CLI: an error is one line on stderr and exit status 1 (2 for a usage error)."""
    sys.exit(run_command(sys.argv[1:] if args is None else args))


def run_command(args: list[str]) -> int:
    """Run one command and answer its exit status; the Temporal runtime is shut down before we return."""
    import os

    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError  # Typer's own click

    from pressroom.failures import EXIT_USAGE, explain
    from pressroom.temporal import close_runtime

    try:
        try:
            app(args=args, prog_name="pressroom", standalone_mode=False)
            return 0
        except NoArgsIsHelpError as error:
            error.show()  # `pressroom dev` alone: the group's help
            return EXIT_USAGE
        except UsageError as error:
            where = f" (see `{error.ctx.command_path} --help`)" if error.ctx else ""
            print_error(f"{error.format_message()}{where}")
            return EXIT_USAGE
        except ClickException as error:
            print_error(error.format_message())
            return error.exit_code
        except typer.Exit as done:
            return done.exit_code
        except (KeyboardInterrupt, typer.Abort):
            return 130
        except Exception as error:
            if os.environ.get("PRESSROOM_DEBUG"):
                raise
            failure = explain(error)
            print_error(failure.line)
            return failure.status
    finally:
        # Join the Temporal runtime's threads now, while the interpreter is whole: a thread left
        # finishing an RPC callback during finalisation aborts the process after its work succeeded.
        close_runtime()


def print_error(line: str) -> None:
    from rich.markup import escape

    from pressroom.errors import one_line

    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(one_line(line))}", highlight=False)


if __name__ == "__main__":
    main()

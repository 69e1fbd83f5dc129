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

from devstack.servers import DevStackError
from pressroom.database import DatabaseUnavailable
from pressroom.errors import NotFound, PressroomError
from pressroom.settings import ConfigurationError, Settings, dev_stack_file, get_settings
from pressroom.temporal import TemporalUnavailable

app = typer.Typer(help="Pressroom: durable background jobs for newsletter publishing, on Temporal.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
console = Console()
T = TypeVar("T")

# Errors the operator can act on: printed as one line, exit status 1.
OPERATOR_ERRORS = (PressroomError, ConfigurationError, DatabaseUnavailable, TemporalUnavailable, DevStackError)


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

    settings = settings or get_settings()
    conn = await database.connect_once(settings.require_database())
    try:
        status = await conn.fetchval("SELECT status FROM emails WHERE id = $1", email_id)
    finally:
        await conn.close()
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

            return await follow_newsletter(start.workflow_id, client=client, on_progress=show)

    outcome = run_async(work())
    if outcome is not None:
        console.print(f"email {email_id}: {outcome.status}" + (f" — {outcome.message}" if outcome.message else ""),
                      highlight=False)
        if outcome.status == "failed":
            raise PressroomError(f"email {email_id} failed: {outcome.message}")

# --- outbox and members ------------------------------------------------------------------------

# --- analytics ---------------------------------------------------------------------------------

# --- scheduled posts ---------------------------------------------------------------------------

# --- demo and operations -----------------------------------------------------------------------

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


def main() -> None:
    """Run the CLI; an operator error becomes one line on stderr and exit status 1."""
    try:
        app()
    except OPERATOR_ERRORS as error:
        Console(stderr=True).print(f"[red]error:[/red] {error}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()

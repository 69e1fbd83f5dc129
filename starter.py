"""The `pressroom` command line: parse, call a starter function, print.

Starter functions take an optional Temporal client so that tests call them with theirs. Every
command has --help; every error is one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Awaitable, TypeVar

import typer
from rich.console import Console

from devstack.servers import DevStackError
from pressroom.database import DatabaseUnavailable
from pressroom.errors import PressroomError
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

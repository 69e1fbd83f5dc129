"""The `pressroom` command line: parse, call a starter function, print.

Starter functions take an optional Temporal client so that tests call them with theirs. Every
command has --help; every error is one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Awaitable, TypeVar

import typer
from rich.console import Console

from devstack.servers import DevStackError
from pressroom.database import DatabaseUnavailable
from pressroom.errors import PressroomError
from pressroom.settings import ConfigurationError, Settings, get_settings
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
    console.print("\nThe stack is recorded in .pressroom/stack.json; pressroom commands use it for unset variables.")
    console.print("To use it from other programs, export:")
    for variable, key in (("DATABASE_URL", "database_url"), ("TEMPORAL_ADDRESS", "temporal_address"),
                          ("MAILGUN_BASE_URL", "mailgun_base_url"), ("MAILGUN_DOMAIN", "mailgun_domain")):
        if key in status.values:
            console.print(f"  export {variable}={status.values[key]}", highlight=False)
    if "mailgun_api_key" in status.values:
        console.print("  export MAILGUN_API_KEY=$(python -c \"import json;print(json.load(open('.pressroom/stack.json'))"
                      "['mailgun_api_key'])\")", highlight=False)


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

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    run_async(worker_module.run())


# --- newsletter --------------------------------------------------------------------------------

# --- outbox and members ------------------------------------------------------------------------

# --- analytics ---------------------------------------------------------------------------------

# --- scheduled posts ---------------------------------------------------------------------------

# --- demo and operations -----------------------------------------------------------------------


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

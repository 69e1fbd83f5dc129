"""The `pressroom` command line: one sub-command per job, each a thin layer over operations/.

The commands live in commands/ (one module per job): they parse, call one operation and print.
Everything a command does, the demo, the benchmarks and the tests do through the same operations.
Every command has --help; every operator error is one line on stderr and exit status 1.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from commands import analytics, dev, limits, members, newsletter, operate, outbox, posts
from devstack.servers import DevStackError
from pressroom import tracing
from pressroom.database import DatabaseUnavailable
from pressroom.errors import PressroomError
from pressroom.settings import ConfigurationError
from pressroom.temporal import TemporalUnavailable

app = typer.Typer(help="Pressroom: durable background jobs for newsletter publishing, on Temporal.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
app.add_typer(dev.app, name="dev")
app.add_typer(newsletter.app, name="newsletter")
app.add_typer(members.app, name="members")
app.add_typer(outbox.app, name="outbox")
app.add_typer(analytics.app, name="analytics")
app.add_typer(posts.app, name="posts")
app.add_typer(limits.app, name="limits")
app.add_typer(operate.app)

# Errors the operator can act on: printed as one line, exit status 1.
OPERATOR_ERRORS = (PressroomError, ConfigurationError, DatabaseUnavailable, TemporalUnavailable, DevStackError)


def main() -> None:
    """Run the CLI; an operator error becomes one line on stderr and exit status 1."""
    tracing.configure_from_environment()  # OTEL_* variables; off when unset
    try:
        app()
    except OPERATOR_ERRORS as error:
        Console(stderr=True).print(f"[red]error:[/red] {error}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()

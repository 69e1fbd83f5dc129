"""The `pressroom` command line: one sub-command per job, each a thin layer over operations/.

The commands live in commands/ (one module per job): they parse, call one operation and print.
Everything a command does, the demo, the benchmarks and the tests do through the same operations.
Every command has --help; every error is one line on stderr, exit status 1 (2 for a usage error).
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from commands import (analytics, dev, frontdoor, limits, members, newsletter, operate, outbox, posts,
                      readable_help_types, webhooks)
from pressroom import tracing

app = typer.Typer(help="Pressroom: durable background jobs for newsletter publishing, on Temporal.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
readable_help_types()


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import version

        print(f"pressroom {version('pressroom')}")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")) -> None:
    """Pressroom: durable background jobs for newsletter publishing, on Temporal."""
app.add_typer(dev.app, name="dev")
app.add_typer(newsletter.app, name="newsletter")
app.add_typer(members.app, name="members")
app.add_typer(outbox.app, name="outbox")
app.add_typer(analytics.app, name="analytics")
app.add_typer(posts.app, name="posts")
app.add_typer(limits.app, name="limits")
app.add_typer(webhooks.app, name="webhooks")
app.add_typer(operate.app)
app.add_typer(frontdoor.app)


def main(args: list[str] | None = None) -> None:
    """Run the CLI: an error is one line on stderr and exit status 1 (2 for a usage error)."""
    sys.exit(run_command(sys.argv[1:] if args is None else args))


def run_command(args: list[str]) -> int:
    """Run one command and answer its exit status; the Temporal runtime is shut down before we return.

    commands/failures.py turns any exception into the one line printed (and its status).
    """
    import os

    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError  # Typer's own click

    from commands.failures import EXIT_USAGE, explain
    from pressroom.temporal import close_runtime

    tracing.configure_from_environment()  # OTEL_* variables; off when unset
    configure_command_logging()
    # Whole lines on stdout even in a pipe: a note or log line on stderr never lands inside one.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
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


def configure_command_logging() -> None:
    """A command's log lines: warnings and errors only (libraries' too), masked as the worker's are.
    `pressroom worker` sets the worker's levels itself."""
    import logging

    from pressroom import logs
    from pressroom.settings import ConfigurationError, load_settings

    try:
        settings = load_settings()  # not get_settings(): `dev up` may change what a later read finds
    except ConfigurationError:  # the command itself reports it, in one line
        logs.configure(level=logging.WARNING)
        return
    logs.configure(settings.secret_values(), logging.WARNING, settings.log_format,
                   max(logging.WARNING, logs.level_number(settings.library_log_level)))


def print_error(line: str) -> None:
    from rich.markup import escape

    from pressroom.errors import one_line

    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(one_line(line))}", highlight=False)


if __name__ == "__main__":
    main()

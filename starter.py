"""The `pressroom` command line: one sub-command per job, each a thin layer over operations/.

The commands live in commands/ (one module per job): they parse, call one operation and print.
Everything a command does, the demo, the benchmarks and the tests do through the same operations.
Every command has --help; every error is one line on stderr, exit status 1 (2 for a usage error).
"""

from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console
from typer.core import TyperGroup

from commands import readable_help_types
from pressroom import tracing

# Each job's commands (commands/<module>.py, its Typer app named `app`), in the order --help lists
# them; the commands of `operate` (migrate, worker, demo, check, temporal, codec-server, patches)
# and `frontdoor` sit at the top level. A module is imported only when one of its commands runs or
# help lists it, so a command pays for its own imports only: tests and scripts start the CLI often.
GROUPS = ["dev", "newsletter", "newsletters", "members", "outbox", "analytics", "posts", "limits", "webhooks",
          "integrations", "staff"]
TOP_LEVEL = ["operate", "frontdoor"]


def _group(module: str):
    return typer.main.get_group(importlib.import_module(f"commands.{module}").app)


class JobCommands(TyperGroup):
    def list_commands(self, ctx) -> list[str]:
        return [*GROUPS, *(name for module in TOP_LEVEL for name in _group(module).list_commands(ctx))]

    def get_command(self, ctx, name: str):
        if name in GROUPS:
            group = _group(name)
            group.name = name
            return group
        for module in TOP_LEVEL:
            command = _group(module).get_command(ctx, name)
            if command is not None:
                return command
        return None


app = typer.Typer(cls=JobCommands, help="Pressroom: durable background jobs for newsletter publishing, on Temporal.",
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


def main(args: list[str] | None = None) -> None:
    """Run the CLI: an error is one line on stderr and exit status 1 (2 for a usage error)."""
    status = run_command(sys.argv[1:] if args is None else args)
    if threads_outlive_command():
        # A native thread still running when the interpreter finalises aborts it (exit 134) after
        # the command's work is done and said: end without finalising, the output flushed.
        import logging
        import os

        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


def threads_outlive_command(wait_seconds: float = 1.0) -> bool:
    """Is a thread besides this one still alive once the command is done (Linux: /proc/self/task)?
    A thread just joined stays listed for a moment, so a listed one gets `wait_seconds` to go."""
    import os
    import time

    tasks = "/proc/self/task"
    if not os.path.isdir(tasks):
        return False
    deadline = time.monotonic() + wait_seconds
    while len(os.listdir(tasks)) > 1:
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.02)
    return False


def run_command(args: list[str]) -> int:
    """Run one command and answer its exit status; the Temporal runtime is shut down before we return.

    commands/failures.py turns any exception into the one line printed (and its status).
    """
    import os

    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError  # Typer's own click

    from commands.failures import EXIT_USAGE, explain

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
        # A command that never loaded the Temporal module has no runtime (and need not load it).
        temporal = sys.modules.get("pressroom.temporal")
        if temporal is not None:
            temporal.close_runtime()


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

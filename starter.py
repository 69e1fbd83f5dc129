"""The `pressroom` command line: one sub-command per job, each a thin layer over operations/.

The commands live in commands/ (one module per job): they parse, call one operation and print.
Everything a command does, the demo, the benchmarks and the tests do through the same operations.
Every command has --help; every error is one line on stderr, exit status 1 (2 for a usage error).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time

import typer
from rich.console import Console
from rich.markup import escape
from typer._click.core import Command
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError  # Typer's own click
from typer.core import TyperGroup

from commands import EXIT_USAGE, readable_help_types

# The one place where the command line loads lazily (docs/contributing.md, "Imports"): every other
# module imports at its top. Each command, its module and the line `pressroom --help` lists for it,
# in that order: the list is read from here, so `--version` and `--help` import no command module,
# and a command imports its own module (and so what it runs) only when it runs or shows its help.
# tests/foundation/test_cli.py holds each line to its command's own help.
COMMANDS: dict[str, tuple[str, str]] = {
    "dev": ("commands.dev", "The local development stack: PostgreSQL, Temporal with its Web UI, a Mailgun "
                            "simulator (or, with PRESSROOM_EMAIL_PROVIDER=ses, the SES stand-in)."),
    "newsletter": ("commands.newsletter", "Send newsletters: one durable run per email."),
    "newsletters": ("commands.newsletters", "The site's newsletters: add, list, edit."),
    "members": ("commands.members", "Members of the site."),
    "outbox": ("commands.outbox", "The outbox: events delivered with retries and an idempotency ledger."),
    "analytics": ("commands.analytics", "Email analytics: the schedule that fetches Mailgun events into statistics."),
    "posts": ("commands.posts", "Scheduled posts: one durable timer per post."),
    "limits": ("commands.limits", "The provider's limits: batch sizes learned per sending domain, and send caps."),
    "webhooks": ("commands.webhooks", "The provider's signed pushes (Mailgun's webhooks, SES's SNS notifications): "
                                      "statistics within seconds; for Mailgun, polling stays as the net."),
    "integrations": ("commands.integrations", "Integrations: their Admin API keys, and their webhooks."),
    "staff": ("commands.staff", "Staff who sign in to the dashboard."),
    "migrate": ("commands.operate", "Apply the schema migrations not yet applied (safe to run from several "
                                    "processes at once)."),
    "worker": ("commands.worker", "Run a worker on the task queue until SIGINT or SIGTERM."),
    "demo": ("commands.demo", "Everything in one minute: dev stack, a site, a welcome email, a scheduled post, its "
                              "newsletter, analytics, and a closing table. Run it again any time; it reuses the "
                              "data in ./.pressroom."),
    "check": ("commands.operate", "Reach PostgreSQL, Temporal and Mailgun, then check what running needs: workers "
                                  "polling the task queue, the schedules, the outbox relay, the webhook inbox "
                                  "draining; one line each."),
    "status": ("commands.operate", "Another name for `pressroom check`: is everything Pressroom needs running?"),
    "codec-server": ("commands.operate", "Serve /decode and /encode so the Web UI shows encrypted histories in "
                                         "clear."),
    "temporal": ("commands.operate", "Prepare a Temporal namespace for Pressroom."),
    "patches": ("commands.operate", "Workflow patches: which may be retired."),
    "serve": ("commands.frontdoor", "Serve /unsubscribe/, the provider's pushes (/webhooks/mailgun or "
                                    "/webhooks/ses), /healthz and the editors' dashboard (/pressroom/) until SIGINT "
                                    "or SIGTERM."),
}


def load(name: str) -> Command:
    """The command itself, its module imported: one command of a module that holds several
    (commands/operate.py), or a job's group (the module's Typer app)."""
    app = typer.main.get_group(importlib.import_module(COMMANDS[name][0]).app)
    if name in app.commands:
        return app.commands[name]
    app.name = name
    return app


class JobCommands(TyperGroup):
    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, name: str):
        """What `--help` lists: the name and its line, nothing imported."""
        if name not in COMMANDS:
            return None
        return typer.core.TyperCommand(name, help=COMMANDS[name][1])

    def resolve_command(self, ctx, args):
        """The command that runs (or shows its own help): its module imported now."""
        name, _, rest = super().resolve_command(ctx, args)
        return name, load(name) if name else None, rest


app = typer.Typer(cls=JobCommands, help="Pressroom: durable background jobs for newsletter publishing, on Temporal.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
readable_help_types()


def _version(shown: bool) -> None:
    if shown:
        from importlib import metadata  # the installed version: read only when asked

        print(f"pressroom {metadata.version('pressroom')}")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")) -> None:
    """Pressroom: durable background jobs for newsletter publishing, on Temporal."""
    # Here, not before: `--version` and `--help` end before this runs, and need neither.
    from pressroom import tracing

    if tracing.wanted():  # the OTEL_* variables; the SDK is loaded only then
        importlib.import_module("pressroom.tracing_export").configure_from_environment()
    configure_command_logging()


def main(args: list[str] | None = None) -> None:
    """Run the CLI: an error is one line on stderr and exit status 1 (2 for a usage error)."""
    status = run_command(sys.argv[1:] if args is None else args)
    if threads_outlive_command():
        # A native thread still running when the interpreter finalises aborts it (exit 134) after
        # the command's work is done and said: end without finalising, the output flushed.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


def threads_outlive_command(wait_seconds: float = 1.0) -> bool:
    """Is a thread besides this one still alive once the command is done (Linux: /proc/self/task)?
    A thread just joined stays listed for a moment, so a listed one gets `wait_seconds` to go."""
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
            from commands.failures import explain  # what every service's errors mean: loaded on one

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
    from pressroom.errors import one_line  # Temporal's errors come with it: loaded on an error only

    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(one_line(line))}", highlight=False)


if __name__ == "__main__":
    main()

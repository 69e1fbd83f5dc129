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
# module imports at its top. Each command (a group's by its path, "newsletter send"), its module and
# the line its group's `--help` lists for it, in that order: the lists are read from here, so
# `--version`, `--help` and a group's `--help` import no command module, and a command imports its
# own module (and so what it runs) only when it runs or shows its own help.
# tests/foundation/test_cli.py holds each line to its command's own help, and each group's list to it.
COMMANDS: dict[str, tuple[str, str]] = {
    "dev": ("commands.dev", "The local development stack: PostgreSQL, Temporal with its Web UI, a Mailgun simulator "
                            "(or, with PRESSROOM_EMAIL_PROVIDER=ses, the SES stand-in)."),
    "dev up": ("commands.dev", "Start what is not configured (data is kept in ./.pressroom between runs)."),
    "dev env": ("commands.dev", "Print `export` lines for the running stack (its generated keys, and "
                                "PRESSROOM_DEV_PG_BIN: the folder of its PostgreSQL's own pg_dump and psql, whose "
                                "version matches the server's)."),
    "dev down": ("commands.dev", "Stop the development stack (its data stays for the next `dev up`, unless --purge)."),
    "newsletter": ("commands.newsletter", "Send newsletters: one durable run per email."),
    "newsletter send": ("commands.newsletter", "Send an email to every recipient, once; a second start finds the first"
                                               " run."),
    "newsletter cancel": ("commands.newsletter", "Stop an email's send between batches (batches already accepted stay "
                                                 "sent); safe to repeat."),
    "newsletter resume": ("commands.newsletter", "Go on with a send paused for its early bounce or complaint rate; "
                                                 "safe to repeat."),
    "newsletter retry": ("commands.newsletter", "Correct a failed email (filter, subject) and send it again."),
    "newsletter status": ("commands.newsletter", "The email's state, its batches, and its run."),
    "newsletter follow": ("commands.newsletter", "Follow the email's run until it ends; print its outcome."),
    "newsletter preview": ("commands.newsletter", "Print what a member gets (subject, then the HTML or the text); "
                                                  "nothing is sent."),
    "newsletter test": ("commands.newsletter", "Send one untracked copy with \"[TEST]\" in the subject; the email's "
                                               "status, batches and statistics stay."),
    "newsletter list": ("commands.newsletter", "Emails, newest first, a page at a time, with the figures analytics "
                                               "fetched so far."),
    "newsletter report": ("commands.newsletter", "How an email did: delivered, opened, failed, unsubscribed, "
                                                 "complained; why members were left out; opens over time."),
    "newsletters": ("commands.newsletters", "The site's newsletters: add, list, edit."),
    "newsletters add": ("commands.newsletters", "Add a newsletter; new members are subscribed to it unless "
                                                "--no-subscribe-on-signup."),
    "newsletters list": ("commands.newsletters", "Every newsletter, oldest first."),
    "newsletters edit": ("commands.newsletters", "Change a newsletter; only the options given (its design's too)."),
    "members": ("commands.members", "Members of the site."),
    "members add": ("commands.members", "Add a member; with --welcome, their welcome email (paid for comped members) "
                                        "goes out through the outbox."),
    "members resubscribe": ("commands.members", "Mail a member again whom the site subscribed again: off Mailgun's "
                                                "suppression lists, and Pressroom's."),
    "members update": ("commands.members", "Change a member's name, status, newsletters or labels; every input is "
                                           "checked before anything is written."),
    "members delete": ("commands.members", "Delete a member and their personal data; records of sent emails keep their"
                                           " id, never their address."),
    "members import": ("commands.members", "Add or update members from a CSV export: every row checked; refused rows "
                                           "reported by line and why."),
    "members export": ("commands.members", "Write members in the reference platform's CSV export format, which its "
                                           "importer (and ours) reads."),
    "members list": ("commands.members", "Members, newest first, a page at a time; or those an email left out, and "
                                         "why."),
    "members show": ("commands.members", "One member: status, note, subscriptions, suppression and why, outbox "
                                         "entries, and their last emails."),
    "members unsubscribe": ("commands.members", "Unsubscribe a member the way their own link does (recorded as an "
                                                "operator's); safe to repeat."),
    "outbox": ("commands.outbox", "The outbox: events delivered with retries and an idempotency ledger."),
    "outbox status": ("commands.outbox", "Counts by state, the age of the oldest entry waiting, the site's events by "
                                         "type and by webhook."),
    "outbox list": ("commands.outbox", "Entries, newest first, a page at a time (`outbox show ID` and `outbox requeue "
                                       "ID` take the id)."),
    "outbox show": ("commands.outbox", "One entry: its state, attempts and last error."),
    "outbox requeue": ("commands.outbox", "Try an entry again from the start (its attempts are reset), or every entry "
                                          "a filter names."),
    "automations": ("commands.automations", "Automations: member email sequences, one durable run per member."),
    "automations list": ("commands.automations", "Every automation: its status, its actions and its runs by state."),
    "automations show": ("commands.automations", "One automation: its path of actions, each with its revision and "
                                                 "figures."),
    "automations edit": ("commands.automations", "Change one action's subject, body or wait (a new revision); runs "
                                                 "that have not reached it follow it."),
    "automations enable": ("commands.automations", "Switch an automation on: members enter it at signup."),
    "automations disable": ("commands.automations", "Switch an automation off: nobody enters it, and its runs end at "
                                                    "their next step."),
    "automations runs": ("commands.automations", "Its latest fifty runs, newest first, with each one's steps."),
    "automations stats": ("commands.automations", "Its figures: entries per day, emails sent, members who clicked, "
                                                  "click rate."),
    "analytics": ("commands.analytics", "Email analytics: the schedule that fetches Mailgun events into statistics."),
    "analytics schedule": ("commands.analytics", "Create or update this site's analytics schedule, `email-analytics` "
                                                  "on the default task queue (safe to run again)."),
    "analytics run": ("commands.analytics", "Start one analytics run now."),
    "analytics pause": ("commands.analytics", "Pause the schedule (runs in progress finish)."),
    "analytics unpause": ("commands.analytics", "Resume the schedule."),
    "analytics backfill": ("commands.analytics", "Ask the next runs to re-read Mailgun's events between two times."),
    "analytics rejected": ("commands.analytics", "The delivery events set aside (unusable, never applied, never "
                                                 "retried), newest first, with their reason."),
    "analytics status": ("commands.analytics", "The schedule's state, the last runs, the cursors and their lag."),
    "posts": ("commands.posts", "Scheduled posts: one durable timer per post."),
    "posts list": ("commands.posts", "Posts, newest first, a page at a time, with their email (`newsletter report "
                                     "EMAIL_ID`)."),
    "posts schedule": ("commands.posts", "Schedule a post (or move it); a time in the past publishes it at once."),
    "posts unschedule": ("commands.posts", "Set a scheduled post back to draft; its timer ends without publishing."),
    "posts reconcile": ("commands.posts", "Give every scheduled post its workflow at its time, and stop workflows of "
                                          "posts not scheduled."),
    "posts status": ("commands.posts", "Posts by state and the next due; or one post and its timer."),
    "posts add": ("commands.posts", "Add a post from HTML, Markdown, Lexical or mobiledoc; with --newsletter it gets "
                                    "its email, sent when it is published."),
    "posts edit": ("commands.posts", "Change a post: content, audience, newsletter; schedule, publish or unschedule "
                                     "it."),
    "posts delete": ("commands.posts", "Delete a post and its unsent email (a post whose email went out stays)."),
    "limits": ("commands.limits", "The provider's limits: batch sizes learned per sending domain, and send caps."),
    "limits show": ("commands.limits", "Per sending domain: the batch size learned from Mailgun's refusals, the caps "
                                       "and their use."),
    "limits reset": ("commands.limits", "Forget the batch size learned for a domain: later batches start from "
                                        "PRESSROOM_BATCH_SIZE again."),
    "webhooks": ("commands.webhooks", "The provider's signed pushes (Mailgun's webhooks, SES's SNS notifications): "
                                      "statistics within seconds; for Mailgun, polling stays as the net."),
    "webhooks serve": ("commands.webhooks", "Another name for `pressroom serve`: the front door, webhooks included."),
    "webhooks setup": ("commands.webhooks", "Register the URL with the provider for every kind Pressroom applies (safe"
                                            " to run again)."),
    "webhooks status": ("commands.webhooks", "The last event per kind, the inbox's depth and age, refusals by reason."),
    "integrations": ("commands.integrations", "Integrations: their Admin API keys, and their webhooks."),
    "integrations add": ("commands.integrations", "Add an integration and print its Admin API key (id:secret), shown "
                                                  "this once."),
    "integrations list": ("commands.integrations", "The integrations, with their slug (what `webhooks add "
                                                   "--integration` takes) and their key's id (never its secret)."),
    "integrations remove": ("commands.integrations", "Remove an integration and its keys: tokens signed with them are "
                                                     "refused at once."),
    "integrations webhooks": ("commands.integrations", "The site's events (member.added, post.published, …) sent to "
                                                       "integrations' webhooks."),
    "integrations webhooks add": ("commands.integrations_webhooks", "Subscribe a webhook to one of the site's events."),
    "integrations webhooks list": ("commands.integrations_webhooks", "Webhooks with their event, target and last "
                                                                     "attempt."),
    "integrations webhooks remove": ("commands.integrations_webhooks", "Remove a webhook; its events not yet delivered"
                                                                       " are skipped."),
    "integrations webhooks attempts": ("commands.integrations_webhooks", "Recent attempts with their answer or error "
                                                                         "(`outbox requeue ID` sends a refused one "
                                                                         "again)."),
    "staff": ("commands.staff", "Staff who sign in to the dashboard."),
    "staff add": ("commands.staff", "Add a staff member; the password (12 characters or more) is prompted, or read "
                                    "from standard input."),
    "staff list": ("commands.staff", "Every staff member, oldest first."),
    "staff remove": ("commands.staff", "Remove a staff member; their sessions end at once."),
    "retention": ("commands.retention", "Retention: old emails' recipient rows folded into their figures, then "
                                        "dropped."),
    "retention run": ("commands.retention", "Fold and drop now the recipient rows of emails older than the retention "
                                            "period."),
    "retention status": ("commands.retention", "The retention period, emails folded and due, and the recipient rows "
                                               "and bytes that remain."),
    "migrate": ("commands.operate", "Apply the schema migrations not yet applied (safe to run from several processes "
                                    "at once)."),
    "worker": ("commands.worker", "Run a worker on the task queue until SIGINT or SIGTERM."),
    "demo": ("commands.demo", "Everything in one minute: dev stack, a site, a welcome email, a scheduled post, its "
                              "newsletter, analytics, and a closing table. Run it again any time; it reuses the data "
                              "in ./.pressroom."),
    "check": ("commands.operate", "Reach PostgreSQL, Temporal and Mailgun, then check what running needs: workers "
                                  "polling the task queue, the schedules, the outbox relay, the webhook inbox "
                                  "draining; one line each."),
    "status": ("commands.operate", "Another name for `pressroom check`: is everything Pressroom needs running?"),
    "codec-server": ("commands.operate", "Serve /decode and /encode so the Web UI shows encrypted histories in clear."),
    "temporal": ("commands.operate", "Prepare a Temporal namespace for Pressroom."),
    "temporal setup": ("commands.operate", "Register Pressroom's search attributes (EmailId, PostId, PublishAt, "
                                           "OutboxEventType)."),
    "patches": ("commands.operate", "Workflow patches: which may be retired."),
    "patches check": ("commands.operate", "Per patch: open runs that started before the release that introduced it "
                                          "(may retire when none)."),
    "serve": ("commands.frontdoor", "Serve /unsubscribe/, the provider's pushes (/webhooks/mailgun or /webhooks/ses), "
                                    "/healthz and the editors' dashboard (/pressroom/) until SIGINT or SIGTERM."),
}


def load(path: str) -> Command:
    """The command itself, its module imported: one command of a module that holds several
    (commands/operate.py), a job's group (the module's Typer app), or a command in a group."""
    name, *within = path.split()
    app = typer.main.get_group(importlib.import_module(COMMANDS[name][0]).app)
    if name in app.commands:
        command = app.commands[name]
    else:
        app.name = name
        command = app
    for word in within:
        command = command.commands[word]  # type: ignore[attr-defined]  # a group: its path has words after it
    return command


class ListedCommands(TyperGroup):
    """A group whose `--help` lists its commands from COMMANDS; a command is loaded when it runs or
    shows its own help. `path` is the group's ("" for `pressroom` itself)."""

    def __init__(self, *, path: str = "", **attrs) -> None:
        super().__init__(**attrs)
        self.path = path

    def _path_of(self, name: str) -> str:
        return f"{self.path} {name}".strip()

    def list_commands(self, ctx) -> list[str]:
        depth = len(self.path.split()) + 1
        return [path.split()[-1] for path in COMMANDS
                if len(path.split()) == depth and path.startswith(f"{self.path} ".lstrip())]

    def get_command(self, ctx, name: str):
        """What `--help` lists: the name and its line (a group: the group, listed), nothing imported."""
        path = self._path_of(name)
        if path not in COMMANDS:
            return None
        if any(other.startswith(f"{path} ") for other in COMMANDS):
            return ListedCommands(path=path, name=name, help=COMMANDS[path][1], no_args_is_help=True)
        return typer.core.TyperCommand(name, help=COMMANDS[path][1])

    def resolve_command(self, ctx, args):
        """The command that runs (or shows its own help): its module imported now; a group's stays listed."""
        name, command, rest = super().resolve_command(ctx, args)
        if name and not isinstance(command, ListedCommands):
            command = load(self._path_of(name))
            configure_command()
        return name, command, rest


app = typer.Typer(cls=ListedCommands, help="Pressroom: durable background jobs for newsletter publishing, on Temporal.",
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


def configure_command() -> None:
    """Tracing (when the OTEL_* variables ask for it) and the command's logging, once its module is
    loaded: `--version`, `--help` and a group's `--help` need neither."""
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

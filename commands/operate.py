"""The commands that prepare and check Pressroom itself: migrate, check, Temporal setup, codec server, patches."""

from __future__ import annotations

import asyncio

import typer

from commands import JSON_OPTION, console, print_json, run_async
from frontdoor.codec_server import serve
from operations.check import check_report, run_checks
from operations.common import temporal_client
from operations.patches import check_patches
from operations.readiness import RUNNING_CHECKS
from pressroom import database, logs
from pressroom.codec import EncryptionCodec, new_key_entry
from pressroom.errors import PressroomError
from pressroom.readable import when
from pressroom.settings import get_settings
from pressroom.temporal import register_search_attributes

app = typer.Typer()


@app.command()
def migrate() -> None:
    """Apply the schema migrations not yet applied (safe to run from several processes at once)."""
    applied = run_async(database.migrate(get_settings().require_database()))
    console.print(f"applied {', '.join(applied)}" if applied else "the schema is up to date")


CHECK_MARKS = {"ok": "[green]ok  [/green]", "warn": "[yellow]warn[/yellow]", "FAIL": "[red]FAIL[/red]",
               "skip": "[yellow]skip[/yellow]"}


@app.command()
def check(as_json: bool = JSON_OPTION) -> None:
    """Reach PostgreSQL, Temporal and Mailgun, then check what running needs: workers polling the task
    queue, the schedules, the outbox relay, the webhook inbox draining; one line each."""
    results = run_async(run_checks(get_settings(), RUNNING_CHECKS))
    if as_json:
        print_json(check_report(results))
    for result in results if not as_json else ():
        mark = CHECK_MARKS[result.state]
        console.print(f"{mark} {result.service}: {result.detail}", highlight=False, soft_wrap=True)
    failed = [result.service for result in results if not result.ok and result.checked]
    if failed:
        raise PressroomError(f"{', '.join(failed)} {'is' if len(failed) == 1 else 'are'} not ready (see above)")


# The name an operator tries first for "is it all running?": the same checks, the same answer.
app.command("status", help="Another name for `pressroom check`: is everything Pressroom needs running?")(check)


temporal_app = typer.Typer(help="Prepare a Temporal namespace for Pressroom.", no_args_is_help=True)
app.add_typer(temporal_app, name="temporal")


@temporal_app.command("setup")
def temporal_setup() -> None:
    """Register Pressroom's search attributes (EmailId, PostId, PublishAt, OutboxEventType).

    For a self-hosted cluster; the dev stack does this itself. On Temporal Cloud, add them in the
    Cloud UI or with `tcld namespace search-attributes add`.
    """
    async def work():
        return await register_search_attributes(await temporal_client())

    added = run_async(work())
    console.print(f"registered {', '.join(added)}" if added else "every search attribute is already registered")


@app.command("codec-server")
def codec_server(
    port: int = typer.Option(8081, help="Port to listen on."),
    host: str = typer.Option("127.0.0.1", help="Address to bind; keep it private."),
    ui_origin: str = typer.Option("http://localhost:8233", help="The Web UI's origin, the only one a browser may "
                                                                "call from."),
    server_name: list[str] = typer.Option([], "--server-name", help="Another name this server is reached by (a "
                                                                     "reverse proxy's host); repeat for more."),
    allow_no_token: bool = typer.Option(False, "--allow-no-token", help="On loopback only: run without "
                                                                        "PRESSROOM_CODEC_TOKEN (every local "
                                                                        "process can decrypt)."),
    new_key: bool = typer.Option(False, "--new-key", help="Print a fresh key entry for PRESSROOM_ENCRYPTION_KEY "
                                                          "and exit."),
) -> None:
    """Serve /decode and /encode so the Web UI shows encrypted histories in clear."""
    if new_key:
        console.print(new_key_entry(), highlight=False)
        return
    settings = get_settings()
    if not settings.encryption_key.get_secret_value():
        raise PressroomError("PRESSROOM_ENCRYPTION_KEY is not set: there is nothing to decode "
                             "(make a key with `pressroom codec-server --new-key`)")

    logs.configure_from(settings)  # every key and token the settings hold is masked

    async def work():
        codec = EncryptionCodec.from_text(settings.encryption_key.get_secret_value(),
                                          allow_plaintext=settings.codec_allow_plaintext)
        runner = await serve(codec, host=host, port=port, ui_origin=ui_origin.rstrip("/"),
                             token=settings.codec_token.get_secret_value(), allow_no_token=allow_no_token,
                             server_names=server_name)
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


patches_app = typer.Typer(help="Workflow patches: which may be retired.", no_args_is_help=True)
app.add_typer(patches_app, name="patches")


@patches_app.command("check")
def patches_check(task_queue: str = typer.Option(None, "--task-queue", help="Only runs on this task queue."),
                  limit: int = typer.Option(10_000, "--limit", min=1, help="Open runs read per workflow type."),
                  as_json: bool = JSON_OPTION) -> None:
    """Per patch: open runs that started before the release that introduced it (may retire when none)."""
    async def work():
        return await check_patches(await temporal_client(), task_queue=task_queue, limit=limit)

    statuses = run_async(work())
    if as_json:
        return print_json({"patches": [status.as_dict() for status in statuses]})
    for status in statuses:
        patch = status.patch
        verdict = ("[green]may retire[/green]" if status.may_retire else
                   f"[yellow]keep[/yellow]: {status.older_runs:,} open run(s) older than it, the oldest started "
                   f"{when(status.oldest_started)} (e.g. {', '.join(status.examples)})")
        console.print(f"{patch.constant} ({patch.patch_id!r}, {patch.workflow_type}, since {patch.release}): "
                      f"{status.open_runs:,} open, {verdict}", highlight=False)

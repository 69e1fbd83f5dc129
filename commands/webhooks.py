"""`pressroom webhooks …`: the receiver of Mailgun's signed webhooks, their registration, their status."""

from __future__ import annotations

import typer

from commands import JSON_OPTION, console, print_json, run_async
from operations.webhooks import PATH, serve, webhooks_setup, webhooks_status
from pressroom.errors import PressroomError
from pressroom.settings import get_settings

app = typer.Typer(help="Mailgun's signed webhooks: statistics within seconds; polling stays as the net.",
                  no_args_is_help=True)


@app.command("serve")
def webhooks_serve(host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (behind a TLS proxy)."),
                   port: int = typer.Option(8090, "--port", min=1, max=65535, help="Port to listen on.")) -> None:
    """Receive Mailgun's webhooks on POST /webhooks/mailgun until SIGINT or SIGTERM."""
    import asyncio
    import signal

    import worker as worker_module

    settings = get_settings()
    settings.require_webhook_signing_key()
    worker_module.configure_logging(settings)

    async def work() -> None:
        task = asyncio.create_task(serve(host, port, settings, ready=lambda: console.print(
            f"webhook receiver on http://{host}:{port}{PATH}", highlight=False)))
        loop = asyncio.get_running_loop()
        for number in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(number, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            pass

    try:
        run_async(work())
    except OSError as error:
        raise PressroomError(f"the webhook receiver cannot listen on {host}:{port}: {error.strerror}") from None


@app.command("setup")
def webhooks_setup_command(url: str = typer.Option(..., "--url", help=f"The receiver's public URL, e.g. "
                                                                      f"https://hooks.example.com{PATH}")) -> None:
    """Register the URL with Mailgun for every kind Pressroom applies (safe to run again)."""
    for kind, change in run_async(webhooks_setup(url)).items():
        console.print(f"{kind:<15} {change}", highlight=False)


@app.command("status")
def webhooks_status_command(as_json: bool = JSON_OPTION) -> None:
    """The last event per kind, the inbox's depth and age, refusals by reason."""
    status = run_async(webhooks_status())
    if as_json:
        return print_json(status)
    inbox = status["inbox"]
    console.print(f"inbox: {inbox['depth']:,} waiting" + (f", oldest {inbox['oldest_seconds']:,.1f} s"
                                                           if inbox["oldest_seconds"] is not None else ""),
                  highlight=False)
    if not status["kinds"]:
        console.print("no pushed event applied yet", highlight=False)
    for kind, seen in status["kinds"].items():
        console.print(f"{kind:<13} {seen['applied']:>9,} applied, last received "
                      f"{seen['last_received_at']:%Y-%m-%d %H:%M:%S}", highlight=False)
    for reason, refused in status["refusals"].items():
        console.print(f"refused: {refused['count']:>7,} {reason} (last {refused['last_at']:%Y-%m-%d %H:%M:%S})",
                      highlight=False, markup=False)
    if status["set_aside"]:
        console.print(f"set aside: {status['set_aside']:,} pushed events (`pressroom analytics rejected`)",
                      highlight=False)

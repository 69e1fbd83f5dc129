"""`pressroom webhooks …`: the receiver of the provider's signed pushes, their registration, their status."""

from __future__ import annotations

import typer

from commands import JSON_OPTION, console, print_json, run_async
from commands.frontdoor import HOST_OPTION, PORT_OPTION, serve_front_door
from operations.webhooks import webhooks_setup, webhooks_status

app = typer.Typer(help="The provider's signed pushes (Mailgun's webhooks, SES's SNS notifications): statistics "
                       "within seconds; for Mailgun, polling stays as the net.",
                  no_args_is_help=True)


@app.command("serve")
def webhooks_serve(host: str = HOST_OPTION, port: int = PORT_OPTION) -> None:
    """Another name for `pressroom serve`: the front door, webhooks included."""
    serve_front_door(host, port)


SETUP_URL_HELP = "The receiver's public URL, e.g. https://hooks.example.com/webhooks/mailgun (or /webhooks/ses)."


@app.command("setup")
def webhooks_setup_command(url: str = typer.Option(..., "--url", help=SETUP_URL_HELP)) -> None:
    """Register the URL with the provider for every kind Pressroom applies (safe to run again)."""
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
    for reason, refused in status["link_refusals"].items():
        console.print(f"unsubscribe links refused: {refused['count']:>7,} {reason} "
                      f"(last {refused['last_at']:%Y-%m-%d %H:%M:%S})", highlight=False, markup=False)
    if status["set_aside"]:
        console.print(f"set aside: {status['set_aside']:,} pushed events (`pressroom analytics rejected`)",
                      highlight=False)

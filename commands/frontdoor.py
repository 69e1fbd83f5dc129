"""`pressroom serve`: the front door (members' unsubscribe links, the provider's webhooks, health)."""

from __future__ import annotations

import asyncio
import contextlib
import signal

import typer

from commands import console, run_async
from frontdoor.server import HEALTH_PATH, UNSUBSCRIBE_PATH, serve
from pressroom import logs
from pressroom.errors import PressroomError
from pressroom.providers.wiring import push_from_settings
from pressroom.settings import get_settings

app = typer.Typer()

HOST_OPTION = typer.Option("127.0.0.1", "--host", help="Address to bind (behind a TLS proxy).")
PORT_OPTION = typer.Option(8090, "--port", min=1, max=65535, help="Port to listen on.")


@app.command("serve")
def serve_command(host: str = HOST_OPTION, port: int = PORT_OPTION) -> None:
    """Serve /unsubscribe/, the provider's pushes (/webhooks/mailgun or /webhooks/ses), /healthz and the
    editors' dashboard (/pressroom/) until SIGINT or SIGTERM."""
    serve_front_door(host, port)


def serve_front_door(host: str, port: int) -> None:
    settings = get_settings()
    push = push_from_settings(settings)  # the provider's own requirements (Mailgun's signing key, SES's topic)
    settings.require_members_link_secret()
    logs.configure_from(settings)  # every key and token the settings hold is masked

    async def work() -> None:
        task = asyncio.create_task(serve(host, port, settings, ready=lambda: console.print(
            f"front door on http://{host}:{port}: {UNSUBSCRIBE_PATH}, {push.path}, {HEALTH_PATH}, /pressroom/",
            highlight=False)))
        loop = asyncio.get_running_loop()
        for number in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(number, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    try:
        run_async(work())
    except OSError as error:
        raise PressroomError(f"the front door cannot listen on {host}:{port}: {error.strerror}") from None

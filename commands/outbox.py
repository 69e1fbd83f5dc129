"""`pressroom outbox …`: counts by state, one entry, requeue an aborted entry."""

from __future__ import annotations

import typer

from commands import JSON_OPTION, console, print_json, run_async
from operations.outbox import outbox_entry, outbox_status, requeue_outbox_entry

app = typer.Typer(help="The outbox: events delivered with retries and an idempotency ledger.",
                  no_args_is_help=True)


@app.command("status")
def outbox_status_command(as_json: bool = JSON_OPTION) -> None:
    """Counts by state and the age of the oldest entry waiting."""
    status = run_async(outbox_status())
    if as_json:
        return print_json(status)
    for state, count in status["counts"].items():
        console.print(f"{state:<11} {count:>8,}", highlight=False)
    oldest = status["oldest_pending_seconds"]
    console.print("nothing waiting" if oldest is None else f"oldest waiting entry: {oldest:,.1f} s old")


@app.command("show")
def outbox_show(outbox_id: str = typer.Argument(..., help="The outbox entry (outbox.id)."),
                as_json: bool = JSON_OPTION) -> None:
    """One entry: its state, attempts and last error."""
    entry = run_async(outbox_entry(outbox_id))
    if as_json:
        return print_json(entry)
    for field, value in entry.items():
        console.print(f"{field:<16} {'' if value is None else value}", highlight=False, soft_wrap=True)


@app.command("requeue")
def outbox_requeue(outbox_id: str = typer.Argument(..., help="The aborted outbox entry (outbox.id).")) -> None:
    """Try an aborted entry again from the start (its attempts are reset)."""
    run_async(requeue_outbox_entry(outbox_id))
    console.print(f"outbox entry {outbox_id} is pending again", highlight=False)

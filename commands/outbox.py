"""`pressroom outbox …`: counts by state, one entry, requeue an aborted entry."""

from __future__ import annotations

import typer

from commands import (AFTER_OPTION, JSON_OPTION, LIMIT_OPTION, SINCE_OPTION, console, print_json, print_page,
                      repeated_filters, run_async, when)
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


@app.command("list")
def outbox_list(status: str = typer.Option(None, "--status", metavar="STATE",
                                           help="pending, sending, succeeded, failed, aborted or completed."),
                member: str = typer.Option(None, "--member", metavar="MEMBER_ID", help="Only entries about this member."),
                since: str = SINCE_OPTION, limit: int = LIMIT_OPTION, after: str = AFTER_OPTION,
                as_json: bool = JSON_OPTION) -> None:
    """Entries, newest first, a page at a time (`outbox show ID` and `outbox requeue ID` take the id)."""
    from operations.finding import list_page

    page = run_async(list_page("outbox entry", status=status, member=member, since=since, after=after, limit=limit))
    if as_json:
        return print_json(page)
    again = repeated_filters(status=status, member=member, since=since)
    print_page(page, {"outbox_id": "entry", "event_type": "event", "status": "status", "attempts": "attempts",
                      "member_id": "member", "last_error_code": "last error", "created_at": "created"},
               empty="no outbox entries match", more=f"pressroom outbox list{again}")


@app.command("show")
def outbox_show(name: str = typer.Argument(..., metavar="ID|KEY|MEMBER_ID|ADDRESS",
                                           help="The entry's id (`outbox list`), its idempotency key or "
                                                "workflow id, or a member's id or address (their newest entry)."),
                as_json: bool = JSON_OPTION) -> None:
    """One entry: its state, attempts and last error."""
    entry = run_async(outbox_entry(name))
    if as_json:
        return print_json(entry)
    for field, value in entry.items():
        shown = when(value) if field.endswith("_at") and value is not None else value
        console.print(f"{field:<16} {'-' if shown is None else shown}", highlight=False, soft_wrap=True)


@app.command("requeue")
def outbox_requeue(outbox_id: str = typer.Argument(..., help="The aborted outbox entry (outbox.id).")) -> None:
    """Try an aborted entry again from the start (its attempts are reset)."""
    run_async(requeue_outbox_entry(outbox_id))
    console.print(f"outbox entry {outbox_id} is pending again", highlight=False)

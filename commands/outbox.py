"""`pressroom outbox …`: counts by state, one entry, requeue an aborted entry."""

from __future__ import annotations

import typer

from commands import (
    AFTER_OPTION,
    JSON_OPTION,
    LIMIT_OPTION,
    SINCE_OPTION,
    console,
    print_json,
    print_page,
    repeated_filters,
    run_async,
)
from operations.finding import list_page
from operations.outbox import outbox_entry, outbox_status, requeue_outbox_entries, requeue_outbox_entry
from pressroom.errors import BadInput
from pressroom.readable import when

app = typer.Typer(help="The outbox: events delivered with retries and an idempotency ledger.",
                  no_args_is_help=True)


@app.command("status")
def outbox_status_command(as_json: bool = JSON_OPTION) -> None:
    """Counts by state, the age of the oldest entry waiting, the site's events by type and by webhook."""
    status = run_async(outbox_status())
    if as_json:
        return print_json(status)
    for state, count in status.counts.items():
        console.print(f"{state:<11} {count:>8,}", highlight=False)
    oldest = status.oldest_pending_seconds
    console.print("nothing waiting" if oldest is None else f"oldest waiting entry: {oldest:,.1f} s old")
    for kind, line in (("waiting", "pending, waiting"), ("skipped", "skipped")):
        for group in getattr(status, kind):
            console.print(f"{line}: {group.count:,} ({group.code}) {group.reason}", highlight=False,
                          markup=False)
    for title, key in (("site events by type", "by_event"), ("site events by webhook", "by_webhook")):
        if getattr(status, key):
            console.print(title, highlight=False)
        for name, counts in getattr(status, key).items():
            console.print(f"  {name:<36} " + ", ".join(f"{state} {n:,}" for state, n in counts.items()),
                          highlight=False, markup=False)


@app.command("list")
def outbox_list(status: str = typer.Option(None, "--status", metavar="STATE",
                                           help="pending, sending, succeeded, failed, aborted, completed or skipped."),
                member: str = typer.Option(None, "--member", metavar="MEMBER_ID",
                                           help="Only entries about this member."),
                since: str = SINCE_OPTION, limit: int = LIMIT_OPTION, after: str = AFTER_OPTION,
                as_json: bool = JSON_OPTION) -> None:
    """Entries, newest first, a page at a time (`outbox show ID` and `outbox requeue ID` take the id)."""
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
def outbox_requeue(outbox_id: str = typer.Argument(None, metavar="[ID]",
                                                   help="The entry (outbox.id): aborted or skipped."),
                   state: str = typer.Option(None, "--state", metavar="aborted|skipped",
                                             help="Instead of an id: every entry in this state."),
                   reason: str = typer.Option(None, "--reason", metavar="CODE",
                                              help="With --state: only entries with this code (WELCOME_INACTIVE, "
                                                   "MEMBER_DELETED, DELIVERY_CLOSED, WELCOME_CONTENT…, as `outbox "
                                                   "status` and `outbox list` show it)."),
                   as_json: bool = JSON_OPTION) -> None:
    """Try an entry again from the start (its attempts are reset), or every entry a filter names."""
    if (outbox_id is None) == (state is None):
        raise BadInput("give an entry id or --state (with --reason to narrow it), not both")
    if reason is not None and state is None:
        raise BadInput("--reason goes with --state")
    if outbox_id is not None:
        run_async(requeue_outbox_entry(outbox_id))
        if as_json:
            return print_json({"requeued": [outbox_id], "refused": {}})
        return console.print(f"outbox entry {outbox_id} is pending again", highlight=False)
    done = run_async(requeue_outbox_entries(state, reason))
    if as_json:
        return print_json({"requeued": done.requeued, "refused": done.refused})
    console.print(f"{len(done.requeued):,} {state} entr{'y' if len(done.requeued) == 1 else 'ies'}"
                  + (f" with {reason}" if reason else "") + " pending again", highlight=False)
    for why in done.refused.values():
        console.print(f"  not requeued: {why}", highlight=False, markup=False)

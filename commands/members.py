"""`pressroom members …`: add a member (their welcome email goes out through the outbox)."""

from __future__ import annotations

import typer

from commands import console, run_async
from activities.outbox import outbox_workflow_id
from operations.members import add_member

app = typer.Typer(help="Members of the site.", no_args_is_help=True)


@app.command("add")
def members_add(email: str = typer.Argument(..., help="The member's e-mail address."),
                name: str = typer.Option(None, "--name", help="The member's name."),
                status: str = typer.Option("free", "--status", help="free, paid or comped.")) -> None:
    """Add a member; their welcome email (paid for comped members) goes out through the outbox."""
    added = run_async(add_member(email, name, status=status))
    console.print(f"member {added.member_id} added" + (f"; welcome email queued ({outbox_workflow_id(added.welcome_key)})"
                                                        if added.welcome_key else ""), highlight=False)

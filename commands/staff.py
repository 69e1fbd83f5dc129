"""`pressroom staff …`: who may sign in to the dashboard (`pressroom serve`, /pressroom/)."""

from __future__ import annotations

import getpass
import sys

import typer

from commands import JSON_OPTION, console, print_json, print_rows, run_async
from operations.staff import add_staff, list_staff, remove_staff
from pressroom.errors import BadInput
from pressroom.readable import when

app = typer.Typer(help="Staff who sign in to the dashboard.", no_args_is_help=True)


def _read_password() -> str:
    """Prompted twice on a terminal (never echoed); else the first line of standard input."""
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n")
    password = getpass.getpass("password: ")
    if getpass.getpass("again: ") != password:
        raise BadInput("the two passwords differ")
    return password


@app.command("add")
def staff_add(email: str = typer.Argument(..., metavar="EMAIL", help="The staff member's address."),
              as_json: bool = JSON_OPTION) -> None:
    """Add a staff member; the password (12 characters or more) is prompted, or read from standard input."""
    added = run_async(add_staff(email, _read_password()))
    if as_json:
        return print_json(added)
    console.print(f"staff {added.staff_id} added: {added.email} may sign in at /pressroom/", highlight=False)


@app.command("list")
def staff_list(as_json: bool = JSON_OPTION) -> None:
    """Every staff member, oldest first."""
    staff = run_async(list_staff())
    if as_json:
        return print_json([member.as_json() for member in staff])
    if not staff:
        return console.print("no staff yet (`pressroom staff add EMAIL`)", highlight=False)
    print_rows([["staff", "address", "added"]] + [[m.staff_id, m.email, when(m.created_at)] for m in staff])


@app.command("remove")
def staff_remove(email: str = typer.Argument(..., metavar="EMAIL", help="The staff member's address."),
                 as_json: bool = JSON_OPTION) -> None:
    """Remove a staff member; their sessions end at once."""
    removed = run_async(remove_staff(email))
    if as_json:
        return print_json(removed)
    console.print(f"staff {removed.staff_id} removed: {removed.email} can no longer sign in", highlight=False)

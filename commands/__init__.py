"""The `pressroom` commands, one module per job: parse, call one operation (operations/), print.

`starter.py` assembles them into one command line and turns operator errors into one line.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, TypeVar

import typer
from rich.console import Console

console = Console()
T = TypeVar("T")


def run_async(work: Awaitable[T]) -> T:
    return asyncio.run(work)


def warn(message: str) -> None:
    """A note for the operator on stderr, so stdout stays the command's answer (and --json parses)."""
    Console(stderr=True).print(f"[yellow]{message}[/yellow]", highlight=False, soft_wrap=True)


def print_json(data: object) -> None:
    """The --json answer: one JSON document on stdout; times as ISO 8601 strings."""
    import json
    from datetime import datetime

    print(json.dumps(data, indent=2, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v)))


JSON_OPTION = typer.Option(False, "--json", help="Print one JSON document (its shape is in the README).")

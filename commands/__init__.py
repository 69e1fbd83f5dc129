"""The `pressroom` commands, one module per job: parse, call one operation (operations/), print.

`starter.py` assembles them into one command line and turns operator errors into one line.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import sys
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from rich.console import Console
from typer.core import TyperArgument, TyperOption

from pressroom.readable import when

if TYPE_CHECKING:
    from operations.answers import Page

EXIT_ERROR = 1  # a command failed (commands/failures.py says why, in one line)
EXIT_USAGE = 2  # the command line itself was wrong
console = Console(soft_wrap=True)  # a line is never broken: ids stay whole for copy and grep
T = TypeVar("T")


def run_async(work: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(work)


def warn(message: str) -> None:
    """A note for the operator on stderr, so stdout stays the command's answer (and --json parses).

    On a terminal it is yellow; in a pipe or a file, where colour is dropped, it begins `note:`, so
    that with both streams in one place it does not read as part of the answer. What stdout holds
    so far goes out first, so a note never lands inside one of its lines.
    """
    sys.stdout.flush()
    notes = Console(stderr=True)
    notes.print(f"[yellow]{message}[/yellow]" if notes.is_terminal else f"note: {message}", highlight=False,
                soft_wrap=True, markup=notes.is_terminal)


def print_json(data: object) -> None:
    """The --json answer: one JSON document on stdout; times as ISO 8601 strings with their offset."""
    if hasattr(data, "as_json"):  # an operation's answer (operations/answers.py)
        data = data.as_json()

    def plain(value):
        if isinstance(value, datetime):
            return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
        if hasattr(value, "model_dump"):
            return value.model_dump()
        return str(value)

    print(json.dumps(data, indent=2, default=plain))


def plural(count: int, word: str, many: str | None = None) -> str:
    """`1 scheduled post`, `2 scheduled posts`, with the count grouped by thousands."""
    return f"{count:,} {word if count == 1 else many or word + 's'}"


def repeated_filters(**filters: str | None) -> str:
    """The filters given, as the next page's command repeats them (quoted for a shell)."""
    return "".join(f" --{name} {shlex.quote(value)}" for name, value in filters.items() if value)


def print_page(page: Page, columns: dict[str, str], *, empty: str, more: str) -> None:
    """A list as aligned columns, one line per row, never wrapped (ids stay whole for copy and grep):
    `columns` maps a row field to its header; a time reads as `when`, a missing value as `-`."""
    if not page.items:
        console.print(empty, highlight=False)
        return
    print_rows([list(columns.values())] + [[_cell(getattr(row, key)) for key in columns] for row in page.items])
    if page.next_after:
        console.print(f"more: {more} --after {page.next_after}", highlight=False)


def print_rows(rows: list[list[str]]) -> None:
    """Rows of cells as aligned columns (the first row is the header), one line each."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    figure = re.compile(r"-|[\d,.]+%?")
    # A column of figures is aligned right, as figures are read.
    right = [all(figure.fullmatch(row[i]) for row in rows[1:] if row[i]) for i in range(len(widths))]
    for number, row in enumerate(rows):
        line = "  ".join(cell.rjust(width) if right[i] else cell.ljust(width)
                         for i, (cell, width) in enumerate(zip(row, widths, strict=True))).rstrip()
        console.print(line, highlight=False, markup=False, soft_wrap=True, style="bold" if number == 0 else None)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return when(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


JSON_OPTION = typer.Option(False, "--json", help="Print one JSON document (its shape is in docs/operating.md).")
LIMIT_OPTION = typer.Option(50, "--limit", min=1, max=1000, help="Rows per page.")
AFTER_OPTION = typer.Option(None, "--after", metavar="ID", help="The next page: rows after this id (the last one "
                                                                  "shown; the command prints it).")
SINCE_OPTION = typer.Option(None, "--since", metavar="TIME",
                            help="Created since: 30m, 24h, 7d ago, or ISO 8601 with offset.")


_TYPE_WORDS = {"str": "TEXT", "int": "INTEGER", "int range": "INTEGER", "float": "NUMBER", "float range": "NUMBER"}


def readable_help_types() -> None:
    """--help shows a value's kind in words (TEXT, INTEGER) or the metavar each option names, and
    nothing for a flag, instead of Typer's `<bool>`, `<str>` and `<int range>`."""
    def display(param, ctx):
        if getattr(param, "is_flag", False):
            return None
        if param.metavar is not None:
            return param.metavar
        label = param.display_type(ctx)
        return _TYPE_WORDS.get(label.strip("<>"), label.strip("<>").upper())

    # typer has no hook for the words it shows for a type: its method is replaced, once, at start-up.
    TyperOption.display_type_rich = display  # type: ignore[method-assign]  # no hook (above)
    TyperArgument.display_type_rich = display  # type: ignore[method-assign]  # no hook (above)

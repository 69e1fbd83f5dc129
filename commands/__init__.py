"""The `pressroom` commands, one module per job: parse, call one operation (operations/), print.

`starter.py` assembles them into one command line and turns operator errors into one line.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, TypeVar

from rich.console import Console

console = Console()
T = TypeVar("T")


def run_async(work: Awaitable[T]) -> T:
    return asyncio.run(work)

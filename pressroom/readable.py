"""How a time reads to people, the same in every command, page and message."""

from __future__ import annotations

from datetime import UTC, datetime


def when(moment: datetime | str | None) -> str:
    """`2026-11-25 15:34:10 UTC`; `-` for none; an ISO text is read first."""
    if moment is None:
        return "-"
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

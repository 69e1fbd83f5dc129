"""Charts as inline SVG, drawn on the server: no script, nothing fetched."""

from __future__ import annotations

from dataclasses import dataclass

from operations.answers import OpensOverTime
from pressroom.readable import when

WIDTH, HEIGHT = 600, 160


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str  # what a screen reader and a hover say


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    bars: list[Bar]
    top: int
    unit: str


def _unit(seconds: int) -> str:
    return (f"{seconds // 86400} d" if seconds >= 86400 else f"{seconds // 3600} h" if seconds >= 3600
            else f"{seconds // 60} min" if seconds >= 60 else f"{seconds} s")


def opens_chart(opens: OpensOverTime) -> Chart | None:
    """One bar per bucket of the report's opens over time, scaled to the largest; None without opens."""
    if not opens.buckets or opens.bucket_seconds is None:
        return None
    top = max(bucket.opens for bucket in opens.buckets) or 1
    step = WIDTH / len(opens.buckets)
    bars = []
    for number, bucket in enumerate(opens.buckets):
        height = (HEIGHT - 20) * bucket.opens / top
        bars.append(Bar(x=round(number * step + 1, 1), y=round(HEIGHT - height, 1), width=round(max(step - 2, 1), 1),
                        height=round(height, 1), label=f"{when(bucket.at)}: {bucket.opens:,} opens"))
    return Chart(WIDTH, HEIGHT, bars, top, _unit(opens.bucket_seconds))

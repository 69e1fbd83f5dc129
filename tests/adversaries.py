"""Mailgun's documented worst cases as simulator switches; every send fault test runs under each.

A test that passes only on the faithful simulator passes on an assumption Mailgun does not
promise: that it keeps a custom Message-Id, applies every filter, stores events at once, and that
a 5xx means "not sent".
"""

from __future__ import annotations

import pytest

LATE_SECONDS = 1.5  # how late the "late-events" simulator stores events; below the tests' confirm window

ADVERSARIES: dict[str, dict] = {
    "faithful": {},
    "own-ids": {"assign_own_ids": True},
    "ignores-filters": {"ignore_filters": True},
    "late-events": {"storage_delay_seconds": LATE_SECONDS},
    "5xx-after-accepting": {"error_after_accept_rate": 0.15},
    "429-try-again-after": {"rate_limit_rate": 0.15, "retry_after_seconds": 1},
}

# The faithful run stays in the inner loop; the worst cases are the `fault` tier (pyproject.toml).
each_adversary = pytest.mark.parametrize("adversary", [
    pytest.param(name, marks=() if name == "faithful" else pytest.mark.fault) for name in ADVERSARIES])


def play(simulator, adversary: str, **faults) -> None:
    """The test's own faults, with the adversary's switches on top."""
    simulator.set_faults(**{**faults, **ADVERSARIES[adversary]})

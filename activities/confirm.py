"""Confirming an uncertain send before sending it again, for newsletter batches and welcome emails.

A send whose answer was a 5xx, a timeout or a dropped connection, or whose worker died mid-request,
may be queued at the provider. It is looked up in the provider's events (`EmailProvider.find_accepted`);
when it is not found, the workflow waits on a timer and looks again until the confirm window has
passed since the last uncertain attempt, because events may be stored late. Only then is it sent
once more.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio.exceptions import ApplicationError

from pressroom.settings import Settings

# Both ends of the look-up window are widened by this much: Mailgun's clock is not ours.
CLOCK_MARGIN = timedelta(minutes=5)


def lookup_window(first_uncertain_at: datetime, now: datetime) -> tuple[datetime, datetime]:
    """From the first uncertain attempt (every attempt carries the same mark) to now."""
    return first_uncertain_at - CLOCK_MARGIN, now + CLOCK_MARGIN


def confirm_wait(uncertain_for: float, settings: Settings, may_wait: bool) -> float | None:
    """Seconds to wait before looking again, or None when the send should go out once more.

    `uncertain_for` is the time since the last uncertain attempt. `may_wait` is False for callers
    that cannot wait on a timer (runs started before the wait existed): they resend at once.
    """
    remaining = settings.send_confirm_window_seconds - uncertain_for
    if not may_wait or remaining <= 0:
        return None
    return min(settings.send_confirm_poll_seconds, remaining)


def uncertain_sends_exhausted(what: str, attempts: int) -> ApplicationError:
    """No certain answer after `attempts` sends: stop, and leave the send marked uncertain."""
    return ApplicationError(
        f"{what} was sent {attempts} times without a certain answer from the provider and is not in its events; "
        "not sending it again (it stays marked uncertain and is looked up first by any later send)",
        type="UncertainSendsExhausted", non_retryable=True)


class StillConfirming(Exception):
    """An uncertain send is not in the provider's events yet and may still appear: look again later."""

    def __init__(self, wait_seconds: float) -> None:
        super().__init__(f"not in the provider's events yet; looking again in {wait_seconds:.0f} s")
        self.wait_seconds = wait_seconds

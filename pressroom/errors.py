"""The errors a person sees: each is one line in the domain's words, never a traceback."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError, FailureError


class PressroomError(Exception):
    """Something the operator must act on; the CLI prints its message and exits 1."""


class NotFound(PressroomError):
    """A named thing (email, post, outbox entry) does not exist."""


class BadInput(PressroomError):
    """A command or workflow input is malformed; nothing was written."""


class DevStackError(Exception):
    """A development server could not start; the message says which and why, in one line."""


# Arguments are echoed in messages; one of 130 KB must not flood the terminal.
LONGEST_WORD = 80


def shorten(text: str, limit: int = LONGEST_WORD) -> str:
    """`text`, or its head and tail around a count of what was left out."""
    text = str(text)
    if len(text) <= limit:
        return text
    keep = (limit - 20) // 2
    return f"{text[:keep]}…({len(text) - 2 * keep} more characters)…{text[-keep:]}"


def one_line(text: str) -> str:
    """The message on one line, every overlong word shortened."""
    words = " ".join(str(text).split()).split(" ")
    return " ".join(shorten(word) for word in words)


@dataclass(frozen=True)
class FailureCause:
    """What failed under a Temporal wrapper (an ActivityError, a WorkflowFailureError), in its own words."""

    message: str
    type: str | None = None  # an ApplicationError's type (MailgunRejected…); None for a timeout or cancellation
    details: tuple[Any, ...] = ()  # an ApplicationError's details (the newsletter's HTTP status code)

    def __str__(self) -> str:
        """`Type: message`, as ApplicationError prints itself."""
        return f"{self.type}: {self.message}" if self.type else self.message


def cause_of(error: BaseException) -> FailureCause:
    """The cause of a Temporal failure, read one way everywhere (workflows and the CLI).

    Pure: safe to call in workflow code.
    """

    cause = getattr(error, "cause", None)
    # A run that failed because an activity (or child) did: the activity's own words, not "Activity
    # task failed" (`newsletter follow` of a send whose batch creation kept failing).
    while isinstance(cause, (ActivityError, ChildWorkflowError)) and cause.cause is not None:
        cause = cause.cause
    if isinstance(cause, ApplicationError):
        return FailureCause(cause.message, cause.type or None, tuple(cause.details))
    if isinstance(cause, FailureError):
        return FailureCause(cause.message)
    return FailureCause(str(cause or error))

"""How an activity says that retrying cannot help: one helper, so every refusal reads the same way."""

from __future__ import annotations

from temporalio.exceptions import ApplicationError


def non_retryable(kind: str, message: str) -> ApplicationError:
    """A refusal of type `kind` (the name retry policies and workflows match on) in the domain's words."""
    return ApplicationError(message, type=kind, non_retryable=True)

"""What the worker hands every activities class: the shared clients, built once per process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncpg
    from temporalio.client import Client

    from pressroom.providers.port import EmailProvider
    from pressroom.settings import Settings


@dataclass(frozen=True)
class Dependencies:
    settings: "Settings"
    pool: "asyncpg.Pool"
    provider: "EmailProvider"  # the email provider, through its port (pressroom/providers/wiring.py builds it)
    # For the activities that start other workflows (the outbox relay, publish → newsletter).
    temporal: "Client"

    @property
    def mailgun(self) -> "EmailProvider":
        """Temporary: the provider under its former name, for code not yet moved to the port."""
        return self.provider

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
    settings: Settings
    pool: asyncpg.Pool
    provider: EmailProvider  # the email provider, through its port (pressroom/providers/wiring.py builds it)
    # For the activities that start other workflows (the outbox relay, publish → newsletter).
    temporal: Client

    @property
    def provider_title(self) -> str:
        """The provider's name in what a run says to people ("" where a test wires no provider)."""
        return self.provider.title if self.provider is not None else ""

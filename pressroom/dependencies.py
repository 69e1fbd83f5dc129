"""What the worker hands every activities class: the shared clients, built once per process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncpg
    from temporalio.client import Client

    from pressroom.mailgun import MailgunClient
    from pressroom.settings import Settings


@dataclass(frozen=True)
class Dependencies:
    settings: "Settings"
    pool: "asyncpg.Pool"
    mailgun: "MailgunClient"
    # For the activities that start other workflows (the outbox relay, publish → newsletter).
    temporal: "Client"

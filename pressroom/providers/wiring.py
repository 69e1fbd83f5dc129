"""The one place that picks the email provider: Mailgun, from the settings.

The worker builds its provider here (worker.py); the commands that reach the provider directly
(`members resubscribe`, `newsletter test`, `webhooks setup`, `check`) and the webhook receiver do
too. A second provider is one package beside pressroom/providers/mailgun, its settings, and a
branch here."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pressroom.providers.port import EmailProvider, EventPush
    from pressroom.settings import Settings


def provider_from_settings(settings: Settings) -> EmailProvider:
    """The provider the settings name, with its own connection pool: close it with `aclose()`."""
    from pressroom.providers.mailgun import MailgunClient

    return MailgunClient.from_settings(settings)


def push_from_settings(settings: Settings) -> EventPush:
    """The receiving end of the provider's pushed events; needs the signing key, not the API key."""
    from pressroom.providers.mailgun import MailgunPush

    settings.require_webhook_signing_key()
    return MailgunPush(settings.webhook_signing_key.get_secret_value())

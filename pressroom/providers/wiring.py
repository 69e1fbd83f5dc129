"""The one place that picks the email provider: PRESSROOM_EMAIL_PROVIDER=mailgun (the default) or ses.

The worker builds its provider here (worker.py); the commands that reach the provider directly
(`members resubscribe`, `newsletter test`, `webhooks setup`, `check`) and the webhook receiver do
too. A provider is one package under pressroom/providers/, its settings there, and a branch here
(docs/providers-ses.md, "Adding a provider")."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pressroom.providers.mailgun import MailgunClient, MailgunPush
from pressroom.providers.received import StoredAcceptances

# SES's modules (botocore's signer, the SNS certificate check) are imported in its branches only:
# every command that names the provider would otherwise pay them (0.15 s of a status command's start).

if TYPE_CHECKING:
    import asyncpg

    from pressroom.providers.port import EmailProvider, EventPush
    from pressroom.settings import Settings


def provider_title(settings: Settings) -> str:
    """The provider's name for people ("Mailgun", "Amazon SES"), without building its client."""
    if settings.email_provider == "ses":
        from pressroom.providers.ses import SesClient

        return SesClient.title

    return MailgunClient.title


def sending_scope(settings: Settings) -> str:
    """Where the provider sends from (Mailgun: MAILGUN_DOMAIN; SES: the verified domain), without its client."""
    if settings.email_provider == "ses":
        from pressroom.providers.ses.settings import ses_settings

        return ses_settings().domain
    return settings.mailgun_domain


def provider_from_settings(settings: Settings, pool: asyncpg.Pool | None = None) -> EmailProvider:
    """The provider the settings name, with its own connection pool: close it with `aclose()`.
    `pool`: where a provider that confirms sends from received events finds them (SES); without
    it such a provider sends, but cannot confirm an uncertain send."""
    if settings.email_provider == "ses":
        from pressroom.providers.ses import SesClient
        from pressroom.providers.ses.settings import ses_settings

        return SesClient.from_settings(ses_settings(), StoredAcceptances(pool) if pool is not None else None)

    return MailgunClient.from_settings(settings)


def push_path(settings: Settings) -> str:
    """Where the configured provider's pushes arrive (/webhooks/mailgun, /webhooks/ses), without a key."""
    if settings.email_provider == "ses":
        from pressroom.providers.ses.push import SesPush

        return SesPush.path

    return MailgunPush.path


def push_from_settings(settings: Settings) -> EventPush:
    """The receiving end of the provider's pushed events; needs the signing key (Mailgun) or the
    topic (SES), not the API key."""
    if settings.email_provider == "ses":
        from pressroom.providers.ses.push import SesPush
        from pressroom.providers.ses.settings import ses_settings

        ses = ses_settings()
        dev = Path(ses.sns_dev_certificate).read_bytes() if ses.sns_dev_certificate else None
        return SesPush(topic_arn=ses.require_topic(), region=ses.region, dev_certificate=dev)

    settings.require_webhook_signing_key()
    return MailgunPush(settings.webhook_signing_key.get_secret_value())

"""Temporary: the names pressroom.mailgun had, for code not yet moved to the provider port
(pressroom/providers/port.py) and the Mailgun package (pressroom/providers/mailgun/). Removed once
nothing imports it."""

from pressroom.providers.mailgun import (MAILGUN_MAX_EVENTS_PAGE, MAILGUN_MAX_TAGS, PROVIDER, SUPPRESSION_LISTS,
                                         WEBHOOK_KINDS, MailgunClient, MessageFields, WebhookSignature, message_fields,
                                         parse_event, recipient_limit_refusal, verify_webhook, webhook_signature)
from pressroom.providers.port import ACCEPTED, NOT_ACCEPTED, UNCERTAIN
from pressroom.providers.port import ProviderBadResponse as MailgunBadResponse
from pressroom.providers.port import ProviderError as MailgunError
from pressroom.providers.port import ProviderRateLimited as MailgunRateLimited
from pressroom.providers.port import ProviderRejected as MailgunRejected
from pressroom.providers.port import ProviderUnavailable as MailgunUnavailable
from pressroom.providers.port import RecipientLimitExceeded, TooManyRecipients

__all__ = ["ACCEPTED", "MAILGUN_MAX_EVENTS_PAGE", "MAILGUN_MAX_TAGS", "NOT_ACCEPTED", "PROVIDER", "SUPPRESSION_LISTS",
           "UNCERTAIN", "WEBHOOK_KINDS", "MailgunBadResponse", "MailgunClient", "MailgunError", "MailgunRateLimited",
           "MailgunRejected", "MailgunUnavailable", "MessageFields", "RecipientLimitExceeded", "TooManyRecipients",
           "WebhookSignature", "message_fields", "parse_event", "recipient_limit_refusal", "verify_webhook",
           "webhook_signature"]

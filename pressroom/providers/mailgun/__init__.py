"""Mailgun, one implementation of the email provider port: its HTTP client (client.py), how its
answers become the port's errors (errors.py), its events (events.py), its template syntax
(template.py) and its signed webhooks (webhooks.py). Only the wiring (pressroom/providers/wiring.py)
imports this package."""

from pressroom.providers.mailgun.client import (
                                                LIMITS,
                                                MAILGUN_MAX_EVENTS_PAGE,
                                                MAILGUN_MAX_TAGS,
                                                SUPPRESSION_LISTS,
                                                MailgunClient,
                                                MessageFields,
                                                message_fields,
)
from pressroom.providers.mailgun.errors import recipient_limit_refusal
from pressroom.providers.mailgun.events import PROVIDER, parse_event
from pressroom.providers.mailgun.template import mailgun_template
from pressroom.providers.mailgun.webhooks import (
                                                WEBHOOK_KINDS,
                                                MailgunPush,
                                                WebhookSignature,
                                                verify_webhook,
                                                webhook_signature,
)

__all__ = ["LIMITS", "MAILGUN_MAX_EVENTS_PAGE", "MAILGUN_MAX_TAGS", "PROVIDER", "SUPPRESSION_LISTS", "WEBHOOK_KINDS",
           "MailgunClient", "MailgunPush", "MessageFields", "WebhookSignature", "mailgun_template", "message_fields",
           "parse_event", "recipient_limit_refusal", "verify_webhook", "webhook_signature"]

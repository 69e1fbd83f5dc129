"""Mailgun's template syntax: a reader's value goes where `%recipient.NAME%` stands, from the
message's `recipient-variables`."""

from __future__ import annotations

from pressroom.providers.port import fill_placeholders


def recipient_variable(name: str) -> str:
    return f"%recipient.{name}%"


def mailgun_template(text: str) -> str:
    """`text` with the port's neutral placeholders in Mailgun's syntax."""
    return fill_placeholders(text, recipient_variable)

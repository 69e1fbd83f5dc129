"""Mailgun's signed webhooks: the signature, its check, and the receiving end of the port."""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Any

from pressroom.delivery_events import DeliveryEvent, EventRejected
from pressroom.providers.mailgun.events import PROVIDER, parse_event
from pressroom.providers.port import PushedEvent

# The webhook kinds Pressroom registers: every one whose events it applies (clicks it does not).
WEBHOOK_KINDS = ("delivered", "opened", "permanent_fail", "temporary_fail", "unsubscribed", "complained")
_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")
_SIGNATURE = re.compile(r"[0-9a-f]{64}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")


def webhook_signature(signing_key: str, timestamp: str, token: str) -> str:
    """Mailgun's signature of a webhook request: HMAC-SHA256 of timestamp + token, in hex."""
    return hmac.new(signing_key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class WebhookSignature:
    timestamp: int
    token: str


def verify_webhook(signing_key: str, body: Any, now: float, max_age: float,
                   retry_window: float | None = None) -> WebhookSignature:
    """The request's signature checked (compared in constant time) and fresh: its timestamp and token.
    Fresh: signed at most `retry_window` ago (default `max_age`: a retry may carry its first
    signature) and at most `max_age` ahead (clocks differ).

    Raises ValueError with the reason to refuse it (one line: "signature does not match", …)."""
    signature = body.get("signature") if isinstance(body, dict) else None
    if not isinstance(signature, dict) or not isinstance(body.get("event-data"), dict):
        raise ValueError("no signature or no event-data")
    timestamp, token, given = signature.get("timestamp"), signature.get("token"), signature.get("signature")
    timestamp = str(timestamp) if isinstance(timestamp, int) and not isinstance(timestamp, bool) else timestamp
    if not (isinstance(timestamp, str) and _TIMESTAMP.fullmatch(timestamp) and isinstance(token, str)
            and _TOKEN.fullmatch(token) and isinstance(given, str) and _SIGNATURE.fullmatch(given.lower())):
        raise ValueError("signature fields malformed")
    if not hmac.compare_digest(webhook_signature(signing_key, timestamp, token), given.lower()):
        raise ValueError("signature does not match")
    if now - int(timestamp) > (max_age if retry_window is None else retry_window) or int(timestamp) - now > max_age:
        raise ValueError("timestamp stale")
    return WebhookSignature(int(timestamp), token)


class MailgunPush:
    """Mailgun's pushed events, received on /webhooks/mailgun and signed with the domain's key."""

    name = PROVIDER
    path = "/webhooks/mailgun"
    refused_status = 406  # Mailgun's "rejected, do not retry"
    replay_refused = True  # a token is good for one event

    def __init__(self, signing_key: str) -> None:
        self._signing_key = signing_key

    def __repr__(self) -> str:
        return "MailgunPush()"

    async def verify(self, body: Any, now: float, max_age: float, retry_window: float | None = None) -> PushedEvent:
        signature = verify_webhook(self._signing_key, body, now, max_age, retry_window)
        return PushedEvent(timestamp=signature.timestamp, identity=signature.token, item=body["event-data"])

    def parse_event(self, item: Any) -> DeliveryEvent | EventRejected:
        return parse_event(item)

    def acceptance_marks(self, item: Any, event: DeliveryEvent) -> dict[str, str] | None:
        return None  # sends are confirmed from Mailgun's events API

"""SES's events, as its configuration set publishes them to SNS, read as the port's DeliveryEvents.

A pushed item is `{"notification": <SNS MessageId>, "event": <the SES event>}`: the SNS id names it
(SNS's retries of one notification keep it), the event says what happened. Our marks come back as
SES message tags (`mail.tags`: name → [value]), their values escaped as SES allows (`tag_value`).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import pydantic

from pressroom.delivery_events import MESSAGE_LIMIT, DeliveryEvent, EventRejected
from pressroom.providers.port import BATCH_MARK, EMAIL_MARK

PROVIDER = "ses"
# SES's event types → the port's kinds. A Reject (a virus, say) is SES's refusal of the message,
# not the reader's address failing: counted, never a suppression. A Rendering Failure means that
# recipient got nothing: a permanent failure of that recipient (without a code: no suppression).
KINDS = {"Send": "accepted", "Delivery": "delivered", "Open": "opened", "Click": "clicked",
         "Complaint": "complained", "Reject": "other", "DeliveryDelay": "other", "Subscription": "other"}
RENDERING_FAILURE = "Rendering Failure"
_TAG_SAFE = re.compile(r"[A-Za-z0-9-]")
_SMTP_CODE = re.compile(r"\b([245]\d\d)\b")


def tag_value(value: str) -> str:
    """A mark's value in the characters SES takes in a tag (letters, digits, _ and -): every other
    character, and _ itself, as _ and its code point in hex, 4 digits."""
    return "".join(char if _TAG_SAFE.fullmatch(char) else f"_{ord(char):04x}" for char in value)


def tag_text(value: str) -> str:
    """`tag_value` undone."""
    return re.sub(r"_([0-9a-f]{4})", lambda match: chr(int(match.group(1), 16)), value)


def marks_of(event: dict[str, Any]) -> dict[str, str]:
    """The message's tags as our marks (one value each, unescaped)."""
    tags = (event.get("mail") or {}).get("tags") or {}
    return {name: tag_text(values[0]) for name, values in tags.items()
            if isinstance(name, str) and isinstance(values, list) and values and isinstance(values[0], str)}


def _epoch(text: Any) -> float:
    if not isinstance(text, str):
        raise ValueError("the event has no timestamp")
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def parse_event(item: Any) -> DeliveryEvent | EventRejected:
    """One pushed SES event, checked; never raises."""
    notification = item.get("notification") if isinstance(item, dict) else None
    try:
        event = item.get("event") if isinstance(item, dict) else None
        if not isinstance(notification, str) or not isinstance(event, dict):
            raise ValueError("the event is not a notification's SES event")
        kind_name = event.get("eventType") or event.get("notificationType")
        mail = event.get("mail")
        if not isinstance(kind_name, str) or not isinstance(mail, dict):
            raise ValueError("the event has no eventType or no mail")
        destination = mail.get("destination")
        recipient = destination[0] if isinstance(destination, list) and destination else None
        fields: dict[str, Any] = {}
        timestamp = mail.get("timestamp")
        if kind_name == "Bounce":
            bounce = event.get("bounce") or {}
            severity = "permanent" if bounce.get("bounceType") == "Permanent" else "temporary"
            kind = f"failed-{severity}"
            bounced = (bounce.get("bouncedRecipients") or [{}])[0]
            recipient = bounced.get("emailAddress", recipient)
            diagnostic = bounced.get("diagnosticCode")
            code = _SMTP_CODE.search(diagnostic) if isinstance(diagnostic, str) else None
            fields = {"severity": severity, "reason": bounce.get("bounceSubType"),
                      "enhanced_code": bounced.get("status"), "code": int(code.group(1)) if code else None,
                      "message": diagnostic[:MESSAGE_LIMIT] if isinstance(diagnostic, str) else None}
            timestamp = bounce.get("timestamp", timestamp)
        elif kind_name == RENDERING_FAILURE:
            failure = event.get("failure") or {}
            said = failure.get("errorMessage") if isinstance(failure, dict) else None
            kind = "failed-permanent"
            fields = {"severity": "permanent", "reason": "rendering-failure",
                      "message": f"SES could not render the message: {said}"[:MESSAGE_LIMIT] if isinstance(said, str)
                      else "SES could not render the message"}
        else:
            kind = KINDS.get(kind_name, "other")
            detail = event.get({"Delivery": "delivery", "Open": "open", "Click": "click",
                                "Complaint": "complaint"}.get(kind_name, ""), {})
            if kind_name == "Complaint":
                complained = (detail.get("complainedRecipients") or [{}])[0]
                recipient = complained.get("emailAddress", recipient)
            if kind_name == "Reject":
                fields = {"reason": str((event.get("reject") or {}).get("reason", ""))[:200] or None}
            if isinstance(detail, dict) and detail.get("timestamp"):
                timestamp = detail["timestamp"]
        if not isinstance(recipient, str):
            raise ValueError("the event names no recipient")
        marks = marks_of(event)
        return DeliveryEvent(provider=PROVIDER, event_id=notification, kind=kind, name=kind_name.lower(),
                             timestamp=_epoch(timestamp), recipient=recipient, email_id=marks.get(EMAIL_MARK),
                             batch_id=marks.get(BATCH_MARK), provider_message_id=mail.get("messageId"),
                             **{key: value for key, value in fields.items() if value is not None})
    except (AttributeError, IndexError, KeyError, TypeError, ValueError, pydantic.ValidationError) as error:
        reason = error.errors()[0]["msg"] if isinstance(error, pydantic.ValidationError) else str(error)
        return EventRejected(provider=PROVIDER, reason=f"unusable event: {reason}"[:200],
                             event_id=notification if isinstance(notification, str) else None)

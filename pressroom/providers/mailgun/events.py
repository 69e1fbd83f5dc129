"""Mailgun's events (an events API item, or a webhook's `event-data`: the same fields) as
provider-neutral DeliveryEvents, or the one-line reason one cannot be one."""

from __future__ import annotations

import re
from typing import Any

import pydantic

from pressroom.delivery_events import (
    EVENT_ID_LIMIT,
    INT32_MAX,
    MESSAGE_LIMIT,
    REASON_LIMIT,
    RECIPIENT_LIMIT,
    DeliveryEvent,
    EventRejected,
)
from pressroom.providers.port import BATCH_MARK, EMAIL_MARK

PROVIDER = "mailgun"
_KINDS = {"accepted": "accepted", "delivered": "delivered", "opened": "opened", "clicked": "clicked",
          "unsubscribed": "unsubscribed", "complained": "complained"}
_EARLIEST, _LATEST = 946684800.0, 4102444800.0  # 2000-01-01 and 2100-01-01: any other time is not an event's
_VARIABLES_BUDGET = 200  # values in an event's user-variables, nested ones included: ours are two strings
_VARIABLES_DEPTH = 5
_VARIABLE_LIMIT = 4096  # characters of one user variable
_CONTROL = re.compile(r"[\x01-\x08\x0b\x0c\x0e-\x1f\x7f]")
_UNUSABLE = re.compile(r"[\x00\ud800-\udfff]")  # a NUL or half a surrogate pair: PostgreSQL cannot store either


class _Refused(Exception):
    """Why an event cannot be applied; the text is one line without an address."""


def _identifier(value: Any, name: str, limit: int, required: bool = True) -> str | None:
    """A printable string of at most `limit` characters, without surrounding spaces."""
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise _Refused(f"{name} is {'missing' if value is None else 'not a string'}")
    value = value.strip()
    if not value:
        if required:
            raise _Refused(f"{name} is empty")
        return None
    if len(value) > limit:
        raise _Refused(f"{name} is longer than {limit} characters")
    if not value.isprintable():
        raise _Refused(f"{name} holds a control or invisible character")
    return value


def _free_text(value: Any, name: str, limit: int) -> str | None:
    """Text a person reads (a failure's explanation): control characters become spaces, cut at `limit`."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Refused(f"{name} is not a string")
    if _UNUSABLE.search(value):
        raise _Refused(f"{name} holds a NUL byte or an unpaired surrogate")
    value = _CONTROL.sub(" ", value).strip()
    return value[:limit] or None


def _bounded(value: Any, name: str) -> None:
    """User variables are small: a few levels and a few hundred values at most."""
    budget = _VARIABLES_BUDGET
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        budget -= 1
        if budget < 0 or depth > _VARIABLES_DEPTH:
            raise _Refused(f"{name} is nested too deep or holds too many values")
        if isinstance(node, dict):
            stack.extend((item, depth + 1) for pair in node.items() for item in pair)
        elif isinstance(node, list):
            stack.extend((item, depth + 1) for item in node)
        elif isinstance(node, str) and len(node) > _VARIABLE_LIMIT:
            raise _Refused(f"{name} holds a value longer than {_VARIABLE_LIMIT} characters")


def _code(status: dict) -> int | None:
    code = status.get("code")
    if code is None:
        return None
    if isinstance(code, str) and code.strip().isdigit() and len(code.strip()) <= 10:
        code = int(code)
    if not isinstance(code, int) or isinstance(code, bool):
        raise _Refused("delivery-status.code is not an integer")
    if not 0 <= code <= INT32_MAX:
        raise _Refused("delivery-status.code is beyond a 32-bit integer")
    return code


def parse_event(item: Any) -> DeliveryEvent | EventRejected:
    """One Mailgun event (an events API item, or a webhook's `event-data`: the same fields) as a
    DeliveryEvent, or the one-line reason it cannot be one. Never raises."""
    event_id = None
    try:
        if not isinstance(item, dict):
            raise _Refused("the event is not a JSON object")
        event_id = _identifier(item.get("id"), "id", EVENT_ID_LIMIT)
        name = _identifier(item.get("event"), "event", 50)
        stamp = item.get("timestamp")
        if not isinstance(stamp, (int, float)) or isinstance(stamp, bool) or not _EARLIEST <= stamp <= _LATEST:
            raise _Refused("timestamp is missing or not a time between 2000 and 2100")
        recipient = _identifier(item.get("recipient"), "recipient", RECIPIENT_LIMIT)
        variables = item.get("user-variables")
        if variables is None:
            variables = {}
        elif not isinstance(variables, dict):
            raise _Refused("user-variables is not an object")
        elif len(variables) > 8 or not all(isinstance(v, str) and len(v) <= _VARIABLE_LIMIT
                                           for v in variables.values()):
            _bounded(variables, "user-variables")  # the common case, a few short strings, needs no walk
        email_id = _identifier(variables.get(EMAIL_MARK), f"user-variables.{EMAIL_MARK}", 100, required=False)
        batch_id = _identifier(variables.get(BATCH_MARK), f"user-variables.{BATCH_MARK}", 100, required=False)
        message = item.get("message")
        headers = message.get("headers") if isinstance(message, dict) else None
        provider_id = _identifier(headers.get("message-id") if isinstance(headers, dict) else None,
                                  "message.headers.message-id", 998, required=False)
        provider_id = provider_id.strip("<> ") or None if provider_id else None
        if email_id is None and provider_id is None:
            raise _Refused("the event names neither an email (user-variables.email-id) nor a message id")
        fields: dict[str, Any] = {}
        if name == "failed":
            severity = "permanent" if item.get("severity") == "permanent" else "temporary"
            status = item.get("delivery-status")
            if status is not None and not isinstance(status, dict):
                raise _Refused("delivery-status is not an object")
            status = status or {}
            explanation = _free_text(status.get("message"), "delivery-status.message", MESSAGE_LIMIT) \
                or _free_text(status.get("description"), "delivery-status.description", MESSAGE_LIMIT)
            fields = {"kind": f"failed-{severity}", "severity": severity, "code": _code(status),
                      "enhanced_code": _identifier(status.get("enhanced-code"), "delivery-status.enhanced-code", 50,
                                                   required=False),
                      "message": explanation,
                      "reason": _free_text(item.get("reason"), "reason", REASON_LIMIT)}
        else:
            fields = {"kind": _KINDS.get(name or "", "other")}
    except _Refused as refusal:
        return EventRejected(provider=PROVIDER, reason=str(refusal), event_id=event_id)
    except (RecursionError, MemoryError):
        return EventRejected(provider=PROVIDER, reason="the event is too large or nested too deep", event_id=event_id)
    try:
        return DeliveryEvent(provider=PROVIDER, event_id=event_id, name=name, timestamp=float(stamp),
                             recipient=recipient, email_id=email_id, batch_id=batch_id,
                             provider_message_id=provider_id, **fields)
    except pydantic.ValidationError as error:  # checked above already: a second net, never expected to catch
        return EventRejected(provider=PROVIDER, event_id=event_id,
                             reason=f"the event does not fit its model ({error.error_count()} errors)")



def event_message_id(event: dict) -> str:
    """The Message-Id an event reports for its message, without <>; "" when it has none."""
    message = event.get("message")
    headers = message.get("headers") if isinstance(message, dict) else None
    value = headers.get("message-id") if isinstance(headers, dict) else None
    return value.strip().strip("<>") if isinstance(value, str) else ""

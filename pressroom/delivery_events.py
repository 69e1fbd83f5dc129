"""Delivery events in the provider's neutral shape: what every email provider's events become.

Polled pages and pushed webhooks both arrive as provider JSON; the provider's module turns each into
one `DeliveryEvent` or one `EventRejected` (a one-line reason), and everything after that, the
set-based apply and the events set aside, reads only these two shapes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

DeliveryKind = Literal["accepted", "delivered", "opened", "clicked", "failed-permanent", "failed-temporary",
                       "unsubscribed", "complained", "other"]
# The kinds that change what Pressroom stores; the others are counted and otherwise ignored.
APPLIED_KINDS = frozenset(("delivered", "opened", "failed-permanent", "failed-temporary", "unsubscribed",
                           "complained"))
# The kinds that leave a record beyond a time: a failure row, an unsubscribe, a complaint.
RECORDED_KINDS = frozenset(("failed-permanent", "failed-temporary", "unsubscribed", "complained"))
INT32_MAX = 2**31 - 1
EVENT_ID_LIMIT = 200
RECIPIENT_LIMIT = 512
MESSAGE_LIMIT = 2000  # a failure's explanation is cut here: enough to diagnose, a row stays small
REASON_LIMIT = 200


class DeliveryEvent(BaseModel):
    """One provider event, checked; `timestamp` in epoch seconds, ids as the provider gave them.

    `email_id` and `batch_id` are our own marks (variables sent with the message); `provider_message_id`
    is the provider's id of the message, which finds the email when a mark is missing.
    """

    provider: str
    event_id: str
    kind: DeliveryKind
    name: str  # the provider's own name of the event ("failed", "opened" …), for the counts by type
    timestamp: float
    recipient: str
    email_id: str | None = None
    batch_id: str | None = None
    provider_message_id: str | None = None
    severity: Literal["permanent", "temporary"] | None = None
    reason: str | None = None
    code: int | None = None
    enhanced_code: str | None = None
    message: str | None = None

    @property
    def failed(self) -> bool:
        return self.kind in ("failed-permanent", "failed-temporary")


class EventRejected(BaseModel):
    """An event that cannot be applied, and why (one line, no address); `event_id` when it had a usable one."""

    provider: str
    reason: str
    event_id: str | None = None

"""SES's events through SNS: the handler of POST /webhooks/ses in the webhook receiver.

Beside Mailgun's handler (operations/webhooks.py), and kept apart from it: an SNS message is
checked where it enters (size, JSON, fields, the topic ours, SignatureVersion 2 with a certificate
from SNS's own host, fresh), then
* a SubscriptionConfirmation is confirmed (a GET of its SubscribeURL, on SNS's host only);
* a Send event carrying our marks is kept in `provider_acceptances`, what an uncertain send is
  confirmed from (SES has no events API to ask);
* every other event is stored in `webhook_inbox`, applied like Mailgun's by WebhookInboxWorkflow.
Each notification's MessageId is remembered (`webhook_tokens`) in the same statement: SNS's
retries and duplicates store nothing and are answered 200, so that SNS stops sending them.
Answers: 200 stored (or already), 400 refused (counted by reason, never the content), 503 when it
cannot be stored or the certificate cannot be fetched now (SNS tries again).
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from activities.delivery_events.batch import raw_text
from frontdoor.group_commit import Pushed
from frontdoor.receiver import database_unavailable
from pressroom.providers.ses.events import marks_of

if TYPE_CHECKING:
    from aiohttp import web

    from frontdoor.receiver import Receiver

log = logging.getLogger("pressroom.webhooks")
# SNS retries a notification for up to an hour by default delivery policy's longest settings; a
# notification older than this is refused, and its MessageId is remembered this long.
SNS_MAX_AGE = 3600
_KEEP_ACCEPTED = """
WITH token AS (
    INSERT INTO webhook_tokens (provider, token, expires_at) VALUES ($1, $2, to_timestamp($3))
    ON CONFLICT DO NOTHING RETURNING token
), kept AS (
    INSERT INTO provider_acceptances (provider, recipient, marks, provider_message_id, accepted_at)
    SELECT $1, lower($4), $5::jsonb, $6, to_timestamp($7) FROM token ON CONFLICT DO NOTHING RETURNING 1
)
SELECT count(*) FROM token"""


class _Refused(Exception):
    pass


class SesHandler:
    """POST /webhooks/ses, sharing the receiver's pool, counters and refusal counts."""

    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver
        self.push = receiver.push

    async def receive(self, request: web.Request) -> web.Response:
        from aiohttp import web

        try:
            status, text = await self._receive(request)
        except _Refused as refusal:
            status, text = 400, "refused"
            kind = self.receiver.refusals.refused(str(refusal), status)  # counted; the reason holds no content
            self.receiver.requests.with_additional_attributes({"outcome": "refused", "reason": kind}).add(1)
        except Exception as error:
            if not database_unavailable(error):
                raise
            status, text = 503, "try again"
            self.receiver._cannot_store(error)
        return web.Response(status=status, text=text)

    async def _receive(self, request: web.Request) -> tuple[int, str]:
        from frontdoor.deadlines import BodyTooLarge, BodyTooSlow, read_body

        try:
            body = await read_body(request, self.receiver.max_body, self.receiver.body_seconds)
        except BodyTooLarge:
            raise _Refused("body too large") from None
        except BodyTooSlow:
            raise _Refused("body too slow") from None
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):
            raise _Refused("body is not JSON") from None
        try:
            message = self.push.checked_fields(document)
        except ValueError as error:
            raise _Refused(str(error)) from None
        try:
            certificate = await self.push.certificate(message["SigningCertURL"])
            pushed = self.push.verify_with(message, certificate, time.time(), SNS_MAX_AGE)
        except ValueError as error:
            raise _Refused(str(error)) from None
        if message["Type"] == "SubscriptionConfirmation":
            return await self._confirm(message)
        if message["Type"] != "Notification":
            return 200, "ignored"
        item = pushed.item
        event = self.push.parse_event(item)
        raw = raw_text(item)
        if type(event).__name__ == "EventRejected":
            async with self.receiver.pool.acquire() as conn, conn.transaction():
                await self.receiver._set_aside(conn, item, raw)
            raise _Refused(f"event unusable: {event.reason}")
        expires = pushed.timestamp + SNS_MAX_AGE
        if event.kind == "accepted":
            fresh = await self.receiver.pool.fetchval(
                _KEEP_ACCEPTED, self.push.name, pushed.identity, expires, event.recipient,
                json.dumps(marks_of(item["event"])), event.provider_message_id or "", event.timestamp)
        else:
            fresh = await self.receiver.group_commit.store(Pushed(pushed.identity, expires, event.name, raw))
        self.receiver.requests.with_additional_attributes(
            {"outcome": "stored" if fresh else "duplicate", "kind": event.name}).add(1)
        return 200, "stored" if fresh else "already stored"

    async def _confirm(self, message: dict[str, Any]) -> tuple[int, str]:
        import httpx

        try:
            url = self.push.subscribe_url(message)
        except ValueError as error:
            raise _Refused(str(error)) from None
        async with httpx.AsyncClient(timeout=10.0, follow_redirects=False) as http:
            try:
                response = await http.get(url)
            except httpx.HTTPError as error:
                raise ConnectionError(f"SNS's SubscribeURL did not answer ({type(error).__name__})") from None
        if not response.is_success:
            raise ConnectionError(f"SNS answered the subscription's confirmation with {response.status_code}")
        log.info("SNS subscription to %s confirmed", message["TopicArn"])
        return 200, "confirmed"


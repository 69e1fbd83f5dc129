"""The handler of the site's events: one signed POST to one webhook's target, its answer classified.

Signed as the reference platform signs (`X-Ghost-Signature: sha256=<hex HMAC-SHA256 of the body
followed by the timestamp in ms>, t=<timestamp>`, keyed with the webhook's secret), with the
entry's idempotency key in `Idempotency-Key` so a receiver drops a repeat. 2xx: delivered. 410:
the webhook is removed, as the reference removes it. Another 4xx or a redirect: refused for good,
recorded with the answer. 5xx, 408, 429, a timeout or a connection that fails: retried on the
outbox's backoff.

Only where it should go: pressroom/target_urls.py checks the target and every address it resolves to.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from activities.errors import non_retryable
from activities.outbox.models import SiteWebhookEvent
from pressroom.dependencies import Dependencies
from pressroom.target_urls import GuardedResolver, RefusedAddress, check_literal_host

ANSWER_LIMIT = 64 * 1024  # bytes of an answer read; the rest is left unread
ANSWER_KEPT = 300  # characters of an answer not delivered, kept with its attempt (webhook_attempts.answer)
RETRIED_STATUSES = {408, 429}  # 4xx that say "later", not "never"
USER_AGENT = "Pressroom (site webhooks)"
class TargetUnavailable(Exception):
    """No answer, or an answer that says "later": the delivery is retried on the backoff."""


# --- the signature --------------------------------------------------------------------------------

def signature(body: bytes, secret: str, timestamp_ms: int) -> str:
    """X-Ghost-Signature's value: HMAC-SHA256 of the body followed by the timestamp, keyed with the secret."""
    digest = hmac.new(secret.encode(), body + str(timestamp_ms).encode(), hashlib.sha256).hexdigest()
    return f"sha256={digest}, t={timestamp_ms}"


def encoded(body: dict[str, Any]) -> bytes:
    """The body as JSON.stringify writes it (no spaces, characters as they are)."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


# --- the delivery ---------------------------------------------------------------------------------

# One attempt recorded, and the webhook's own record of its last one, together ($1 webhook, $2 outbox
# entry, $3 event, $4 attempt, $5 status code, $6 outcome, $7 error, $8 duration in ms, $9 the event's
# member, $10 the target's answer when not delivered).
_ATTEMPT = """
WITH attempt AS (
  INSERT INTO webhook_attempts (webhook_id, outbox_id, event, attempt, status_code, outcome, error, duration_ms,
                                member_id, answer)
  VALUES ($1, $2, $3, $4, $5, $6, left($7, 500), $8, $9, $10))
UPDATE webhooks SET last_triggered_at = now(), last_triggered_status = $5::text,
       last_triggered_error = left($7, 500) WHERE id = $1"""

# 410 Gone: the webhook goes, as the reference removes it; its other entries waiting are skipped
# with the reason (nothing left to send them to), their bodies cleared.
_GONE = """
WITH gone AS (DELETE FROM webhooks WHERE id = $1 RETURNING id)
UPDATE outbox SET status = 'skipped', last_error_code = 'WEBHOOK_GONE', payload = $3::jsonb,
       last_error_msg = 'its webhook answered 410 Gone and was removed', processed_at = now(), updated_at = now()
WHERE webhook_id = $1 AND id <> $2 AND status IN ('pending', 'failed')"""


def delivered_stub(payload: dict[str, Any]) -> dict[str, Any]:
    """What an entry keeps of its payload once delivered or skipped: the webhook and the resource's
    id, never the body (a deleted member's data leaves the outbox with their last event)."""
    return {key: value for key, value in payload.items() if key != "body"}


def skipped(code: str, why: str) -> dict[str, Any]:
    return {"skipped": why, "code": code}


class SiteWebhooks:
    def __init__(self, deps: Dependencies) -> None:
        self.pool = deps.pool
        self.settings = deps.settings

    async def deliver(self, event: SiteWebhookEvent, key: str, outbox_id: str, attempt: int) -> dict[str, Any]:
        """POST the entry's body to its webhook, once per attempt; safe to repeat: the receiver
        drops a repeat by `Idempotency-Key`, and the ledger is asked before any attempt."""
        webhook = await self.pool.fetchrow("SELECT target_url, secret FROM webhooks WHERE id = $1", event.webhook_id)
        if webhook is None:
            return skipped("WEBHOOK_DELETED", f"webhook {event.webhook_id} was removed before its event was sent")
        if event.body is None:  # cleared while the delivery waited out a backoff
            return skipped("BODY_CLEARED", "the event's body was cleared before it was sent")
        body = encoded(event.body)
        started = time.monotonic()
        try:
            status, answer = await self._post(webhook["target_url"], webhook["secret"] or "", body, key)
        except RefusedAddress as error:
            await self._record(event, outbox_id, attempt, None, "refused", str(error), started)
            raise non_retryable("WEBHOOK_REFUSED_ADDRESS", str(error)) from None
        except TargetUnavailable as error:
            await self._record(event, outbox_id, attempt, None, "retried", str(error), started)
            raise
        if 200 <= status < 300:
            await self._record(event, outbox_id, attempt, status, "delivered", None, started)
            return {"status_code": status}
        if status == 410:
            await self._record(event, outbox_id, attempt, status, "gone", "410 Gone: webhook removed",
                               started)
            await self.pool.execute(_GONE, event.webhook_id, outbox_id, json.dumps(delivered_stub(event.model_dump())))
            return skipped("WEBHOOK_GONE", f"webhook {event.webhook_id} answered 410 Gone and was removed")
        failed = f"Request failed: HTTP {status}"  # the reference's words for last_triggered_error
        # The answer is the target's text (it may repeat the member's name): kept with the attempt,
        # which `members delete` clears; the failure, the log and the history get its digest only.
        kept = _printable(answer)[:ANSWER_KEPT]
        if status >= 500 or status in RETRIED_STATUSES:
            await self._record(event, outbox_id, attempt, status, "retried", failed, started, kept)
            raise TargetUnavailable(f"the target answered HTTP {status} ({_digest(answer)})")
        await self._record(event, outbox_id, attempt, status, "refused", failed, started, kept)
        why = "a redirect, which is not followed" if 300 <= status < 400 else "a refusal"
        raise non_retryable("WEBHOOK_REFUSED", f"the target answered HTTP {status} ({why}; {_digest(answer)}; "
                                               "the answer is kept with the attempt)")

    async def _post(self, url: str, secret: str, body: bytes, key: str) -> tuple[int, bytes]:
        """The status and up to ANSWER_LIMIT bytes of the answer; errors in our words, without the URL."""
        host = urlsplit(url).hostname or ""
        plain = url.startswith("http://")
        check_literal_host(host, self.settings, loopback_only=plain)
        timestamp = int(time.time() * 1000)
        headers = {"Content-Type": "application/json", "Content-Version": "v5", "User-Agent": USER_AGENT,
                   "Idempotency-Key": key}
        if secret:
            headers["X-Ghost-Signature"] = signature(body, secret, timestamp)
        timeout = aiohttp.ClientTimeout(total=self.settings.site_webhooks_timeout_seconds,
                                        connect=min(5.0, self.settings.site_webhooks_timeout_seconds))
        connector = aiohttp.TCPConnector(resolver=GuardedResolver(self.settings, loopback_only=plain),
                                         force_close=True)
        try:
            async with aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False) as session, \
                    session.post(url, data=body, headers=headers, allow_redirects=False) as response:
                answer = bytearray()
                async for chunk in response.content.iter_chunked(8192):
                    answer += chunk
                    if len(answer) >= ANSWER_LIMIT:
                        break
                return response.status, bytes(answer[:ANSWER_LIMIT])
        except TimeoutError:
            raise TargetUnavailable("no answer within "
                                    f"{self.settings.site_webhooks_timeout_seconds:g} s") from None
        except aiohttp.ClientError as error:
            refused = _refusal_in(error)
            if refused is not None:
                raise refused from None
            raise TargetUnavailable(f"the connection failed ({type(error).__name__})") from None
        except RefusedAddress:
            raise

    async def _record(self, event: SiteWebhookEvent, outbox_id: str, attempt: int, status: int | None,
                      outcome: str, error: str | None, started: float, answer: str | None = None) -> None:
        member = (event.model_extra or {}).get("member_id")
        await self.pool.execute(_ATTEMPT, event.webhook_id, outbox_id, event.event, attempt, status, outcome, error,
                                int((time.monotonic() - started) * 1000), member if isinstance(member, str) else None,
                                answer)


def _refusal_in(error: BaseException) -> RefusedAddress | None:
    """The RefusedAddress behind a client error (aiohttp wraps what the resolver raised), if any."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, RefusedAddress):
            return seen
        seen = seen.__cause__ or seen.__context__ or getattr(seen, "os_error", None)
        if seen is error:
            break
    return None


def _digest(answer: bytes) -> str:
    """What a failure says of an answer: its size and the start of its SHA-256 (to tell answers apart)."""
    return f"answer {len(answer)} bytes, sha256 {hashlib.sha256(answer).hexdigest()[:16]}"


def _printable(answer: bytes) -> str:
    text = answer.decode("utf-8", "replace")
    return "".join(c if c.isprintable() else " " for c in text).strip() or "(no body)"

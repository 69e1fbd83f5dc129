"""The handler of the site's events: one signed POST to one webhook's target, its answer classified.

Signed as the reference platform signs (`X-Ghost-Signature: sha256=<hex HMAC-SHA256 of the body
followed by the timestamp in ms>, t=<timestamp>`, keyed with the webhook's secret), with the
entry's idempotency key in `Idempotency-Key` so a receiver drops a repeat. 2xx: delivered. 410:
the webhook is removed, as the reference removes it. Another 4xx or a redirect: refused for good,
recorded with the answer. 5xx, 408, 429, a timeout or a connection that fails: retried on the
outbox's backoff.

Only where it should go: `https://` (plain `http://` to loopback with
PRESSROOM_WEBHOOKS_ALLOW_LOOPBACK), and every address the name resolves to is checked when the
connection is made (a name that later resolves inside the network is refused then too).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from activities.errors import non_retryable
from activities.outbox.models import SiteWebhookEvent
from pressroom.dependencies import Dependencies
from pressroom.errors import BadInput
from pressroom.settings import Settings

ANSWER_LIMIT = 64 * 1024  # bytes of an answer read; the rest is left unread
ANSWER_KEPT = 300  # characters of an answer not delivered, kept with its attempt (webhook_attempts.answer)
RETRIED_STATUSES = {408, 429}  # 4xx that say "later", not "never"
USER_AGENT = "Pressroom (site webhooks)"
_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: inside someone's network, not global
# Not global whatever this Python's table says: IETF protocol assignments (192.0.0.0/24, some of
# which it calls global), the 6to4 relay anycast, IPv6's old site-local addresses.
_NEVER = (ipaddress.ip_network("192.0.0.0/24"), ipaddress.ip_network("192.88.99.0/24"),
          ipaddress.ip_network("fec0::/10"))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# A host the HTTP client's resolver reads as an IPv4 address though it is not dotted-quad:
# `2130706433`, `0177.0.0.1`, `127.1`, `0x7f.1` (inet_aton's forms).
# Each part decimal, octal or hex; a name has a letter in some part other than a 0x prefix (`1a.de`).
_NUMERIC_HOST = re.compile(r"(?:0[xX][0-9a-fA-F]*|\d+)(?:\.(?:0[xX][0-9a-fA-F]*|\d+))*")


class RefusedAddress(Exception):
    """The target's address is one a site's webhook may not reach."""


class TargetUnavailable(Exception):
    """No answer, or an answer that says "later": the delivery is retried on the backoff."""


# --- where a webhook may go -----------------------------------------------------------------------

def address_refusal(address: str, settings: Settings) -> str | None:
    """Why this address may not be reached by a webhook (None: it may). An IPv6 address that carries
    an IPv4 one (mapped, 6to4, Teredo, NAT64) is judged by the IPv4 address it reaches."""
    ip = _reached(ipaddress.ip_address(address.split("%", 1)[0]))
    if any(ip in network for network in _NEVER if network.version == ip.version):
        return "a private, link-local or reserved address"
    if ip.is_loopback:
        return None if settings.site_webhooks_allow_loopback else "a loopback address"
    if ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        return "a private, link-local or reserved address"
    if ip.is_global:
        return None
    if settings.site_webhooks_allow_private and (ip.is_private or ip.is_link_local or ip in _SHARED):
        return None
    return "a private, link-local or reserved address"


def _reached(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if not isinstance(ip, ipaddress.IPv6Address):
        return ip
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def numeric_host(host: str) -> str | None:
    """The IPv4 address a numeric host stands for, as the resolver reads it (`127.1` is 127.0.0.1);
    None for a name. A host that looks numeric but is no address raises BadInput."""
    host = host.rstrip(".")
    if not _NUMERIC_HOST.fullmatch(host):
        return None
    try:
        return socket.inet_ntoa(socket.inet_aton(host))
    except OSError:
        raise BadInput("target_url's host is neither a name nor an address") from None


def check_target_url(url: str, settings: Settings) -> str:
    """The target URL as stored, or BadInput saying what is wrong with it (in one line, without the URL)."""
    if not isinstance(url, str) or not url or len(url) > 2000 or any(c.isspace() for c in url):
        raise BadInput("target_url must be an absolute https:// URL of at most 2000 characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError:
        raise BadInput("target_url is not a valid URL") from None
    host = parts.hostname or ""
    if not host or parts.username or parts.password:
        raise BadInput("target_url must name a host, without a user or password")
    if parts.scheme == "http":
        if not (settings.site_webhooks_allow_loopback and _is_loopback_name(host)):
            raise BadInput("target_url must be https:// (plain http:// only to loopback, with "
                           "PRESSROOM_WEBHOOKS_ALLOW_LOOPBACK=true)")
    elif parts.scheme != "https":
        raise BadInput("target_url must be an https:// URL")
    address = host if _is_ip(host) else numeric_host(host)
    if address is not None and (why := address_refusal(address, settings)):
        raise BadInput(f"target_url is {why}, which a webhook may not reach")
    return url


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _is_loopback_name(host: str) -> bool:
    return host == "localhost" or (_is_ip(host) and ipaddress.ip_address(host).is_loopback)


class GuardedResolver(AbstractResolver):
    """Resolves as usual, then refuses when any address is one a webhook may not reach: the check
    is on the addresses the connection is made to (DNS rebinding finds it closed)."""

    def __init__(self, settings: Settings, *, loopback_only: bool) -> None:
        self.settings = settings
        self.loopback_only = loopback_only
        self.inner = aiohttp.ThreadedResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET,
                      ) -> list[ResolveResult]:
        found = await self.inner.resolve(host, port, family)
        for result in found:
            refusal = address_refusal(result["host"], self.settings)
            if refusal is None and self.loopback_only and not ipaddress.ip_address(result["host"]).is_loopback:
                refusal = "not loopback (plain http:// goes to loopback only)"
            if refusal:
                raise RefusedAddress(f"the target resolves to {refusal}, which a webhook may not reach")
        return found

    async def close(self) -> None:
        await self.inner.close()


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
        if _is_ip(host):  # a literal address is not resolved, so it is checked here
            refusal = address_refusal(host, self.settings)
            if refusal is None and plain and not ipaddress.ip_address(host.split("%", 1)[0]).is_loopback:
                refusal = "not loopback (plain http:// goes to loopback only)"
            if refusal:
                raise RefusedAddress(f"the target is {refusal}, which a webhook may not reach")
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

"""The receiver of the provider's signed pushes (served by `pressroom serve`).

The receiver is stateless, any number behind a load balancer, and names no provider: the
configured provider's push (pressroom/providers/wiring.py, the port's `EventPush`) says where it
listens, checks each request's signature, freshness and whatever else its provider asks (Mailgun:
HMAC-SHA256 of timestamp + token with MAILGUN_WEBHOOK_SIGNING_KEY; SES: SNS's signed messages, see
pressroom/providers/ses/push.py), and parses the event. Here each request is read within its size
and time limits, then in one transaction its identity is recorded (a signed envelope is good for
one event only, whatever that event turns out to be) with the event: a usable event is stored in
`webhook_inbox` (which NOTIFYs WebhookInboxWorkflow; the requests arriving meanwhile share one
commit, see frontdoor/group_commit.py), or kept as an acceptance when the push says so; an
unusable one is set aside with its reason. Answers: 200 once the event is durably stored; the
push's `refused_status` (Mailgun: 406, "rejected, do not retry") for a request that cannot be right
later (malformed, forged, stale, replayed, an unusable event); 503 when it cannot be stored now, so
that the provider tries again: then nothing of it was kept, its identity neither, and its retry is
taken. Every refusal is counted by reason, in the metrics and in `webhooks status`, and logged
without an address, at most once per reason every few seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web
from opentelemetry.trace import SpanKind
from temporalio.common import MetricMeter
from temporalio.runtime import PrometheusConfig, Runtime

from frontdoor.deadlines import BodyTooLarge, BodyTooSlow, read_body
from frontdoor.group_commit import GroupCommit, Pushed
from pressroom import tracing
from pressroom.delivery_events import EventRejected
from pressroom.logs import Refusals, Throttle, since
from pressroom.providers.received import StoredAcceptances
from pressroom.providers.wiring import provider_title, push_from_settings
from pressroom.settings import Settings
from pressroom.store.events import EventBatch, raw_text
from pressroom.temporal import telemetry

if TYPE_CHECKING:
    import asyncpg
    from aiohttp import web

log = logging.getLogger("pressroom.webhooks")

# The configured provider's (pressroom/providers/wiring.py): where its pushes arrive, for the
# commands' texts and the status, which need no signing key.
REFUSALS_FLUSH_SECONDS = 2.0

# An unusable event's token, in the transaction that then sets the event aside (a usable event's is
# stored with it by the group commit): a replayed token is refused before anything else, and a
# token is kept exactly when its request was answered (200 or 406).
_REMEMBER_TOKEN = """
INSERT INTO webhook_tokens (provider, token, expires_at) VALUES ($1, $2, to_timestamp($3))
ON CONFLICT DO NOTHING RETURNING true"""
_FLUSH_REFUSALS = """
INSERT INTO webhook_refusals AS r (provider, reason, count, last_at)
SELECT $1, reason, n, now() FROM unnest($2::text[], $3::bigint[]) AS t(reason, n)
ON CONFLICT (provider, reason) DO UPDATE SET count = r.count + EXCLUDED.count, last_at = now()"""
_SET_ASIDE_PUSHED = """
INSERT INTO delivery_events_rejected (provider, source, event_id, reason, event, digest)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
ON CONFLICT (provider, digest) DO NOTHING"""


def database_unavailable(error: BaseException) -> bool:
    """A database that cannot answer now (a connection lost, a timeout, asyncpg's errors, a pool
    closing): the request is answered 503, try again, never refused."""
    return isinstance(error, (OSError, asyncio.TimeoutError)) or type(error).__module__.startswith("asyncpg")


class Refused(Exception):
    """A request answered 406: one line, no address."""


class Receiver:
    """The receiver's state: the pool, the key, and the refusals counted since the last flush."""

    def __init__(self, pool: asyncpg.Pool, settings: Settings, runtime: Any = None) -> None:

        self.pool = pool
        self.push = push_from_settings(settings)
        self.max_age = settings.webhook_max_age_seconds
        self.retry_window = max(settings.webhook_retry_window_seconds, settings.webhook_max_age_seconds)
        self.max_body = settings.webhook_max_body_bytes
        self.body_seconds = settings.serve_body_timeout_seconds
        self.refusals = Refusals(log, "webhook")
        self.provider_title = provider_title(settings)
        self._unavailable = Throttle()  # a database that is down: one line every few seconds, not per request
        self.group_commit = GroupCommit(pool, self.push.name)  # many requests' events in one commit
        self.acceptances = StoredAcceptances(pool)
        self.runtime = runtime  # kept: its Prometheus endpoint lives as long as it does
        self._instruments(runtime.metric_meter if runtime is not None else None)

        # Imported once: an import statement in a handler is paid on every request.
        self._response = web.Response

    def _instruments(self, meter: Any) -> None:

        meter = meter or MetricMeter.noop
        self.requests = meter.create_counter("pressroom_webhooks_requests", "webhook requests by outcome")
        self._stored: dict[str, Any] = {}  # the counter of stored events per kind, made once
        self.store_ms = meter.create_histogram_float("pressroom_webhooks_store", "time to store an event", "ms")

    def app(self) -> web.Application:

        app = web.Application(client_max_size=self.max_body)
        app.add_routes(self.routes())
        return app

    def routes(self) -> list:

        return [web.post(self.push.path, self.receive)]

    async def receive(self, request: web.Request) -> web.Response:
        path = self.push.path
        with tracing.span(f"POST {path}", {"http.request.method": "POST", "url.path": path,
                                           "webhook.provider": self.push.name}, kind=SpanKind.SERVER) as span:
            try:
                status, text = await self._receive(request)
            except Refused as refusal:
                status, text = self.push.refused_status, "refused"
                self._refused(str(refusal))
            except Exception as error:
                if not database_unavailable(error):
                    raise
                status, text = 503, "try again"  # the provider tries again
                self._cannot_store(error)
            span.set_attribute("http.response.status_code", status)
        return self._response(status=status, text=text)

    async def _receive(self, request: web.Request) -> tuple[int, str]:
        try:
            body = await read_body(request, self.max_body, self.body_seconds)
        except BodyTooLarge:
            raise Refused("body too large") from None
        except BodyTooSlow:
            raise Refused("body too slow") from None
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):
            raise Refused("body is not JSON") from None
        try:
            pushed = await self.push.verify(document, time.time(), self.max_age, self.retry_window)
        except ValueError as error:
            raise Refused(str(error)) from None
        if pushed.item is None:  # no event in it (a subscription confirmed by the push)
            return 200, pushed.said
        started = time.monotonic()
        item = pushed.item
        raw = raw_text(item)
        event = self.push.parse_event(item)
        keep_until = pushed.timestamp + (pushed.keep_seconds or self.retry_window)
        if isinstance(event, EventRejected):
            async with self.pool.acquire() as conn, conn.transaction():
                fresh = await conn.fetchval(_REMEMBER_TOKEN, self.push.name, pushed.token, keep_until)
                if fresh:
                    await self._set_aside(conn, item, raw)
            self.store_ms.record((time.monotonic() - started) * 1000)
            raise Refused(f"event unusable: {event.reason}" if fresh else "token replayed")
        marks = self.push.acceptance_marks(item, event)
        if marks is not None:  # kept to confirm an uncertain send, with its identity
            fresh = await self.acceptances.keep_pushed(self.push.name, pushed.token, keep_until, event.recipient,
                                                       marks, event.provider_message_id or "", event.timestamp)
        else:  # its identity and the event, in a commit shared with others
            fresh = await self.group_commit.store(Pushed(pushed.token, keep_until, event.name, raw))
        self.store_ms.record((time.monotonic() - started) * 1000)
        if not fresh:
            if self.push.replay_refused:
                raise Refused("token replayed")
            self.requests.with_additional_attributes({"outcome": "duplicate", "kind": event.name}).add(1)
            return 200, "already stored"
        stored = self._stored.get(event.name)
        if stored is None:
            stored = self.requests.with_additional_attributes({"outcome": "stored", "kind": event.name})
            if len(self._stored) < 32:  # the kinds a provider has; a signed stranger is counted, not kept
                self._stored[event.name] = stored
        stored.add(1)
        return 200, "stored"

    async def _set_aside(self, conn: asyncpg.Connection, item: Any, raw: str) -> None:
        batch = EventBatch()
        batch.add_one(item, self.push.parse_event, raw=raw)
        await conn.execute(_SET_ASIDE_PUSHED, *batch.rejected_columns("push"))

    def _refused(self, reason: str) -> None:
        kind = self.refusals.refused(reason, self.push.refused_status)
        self.requests.with_additional_attributes({"outcome": "refused", "reason": kind}).add(1)

    def _cannot_store(self, error: BaseException) -> None:
        self.requests.with_additional_attributes({"outcome": "unavailable"}).add(1)
        held = self._unavailable.due()
        if held is not None:
            log.error("webhook not stored (503, %s retries): %s%s", self.provider_title, type(error).__name__,
                      since(held))

    async def flush_refusals(self) -> None:
        """Add the refusals counted since the last flush to webhook_refusals; kept for the next on failure."""
        await flush_refusals(self.pool, self.push.name, self.refusals)

    async def flush_refusals_forever(self) -> None:
        while True:
            await asyncio.sleep(REFUSALS_FLUSH_SECONDS)
            await self.flush_refusals()


async def flush_refusals(pool: asyncpg.Pool, source: str, refusals) -> None:
    """Add `refusals`' counts (pressroom.logs.Refusals) to webhook_refusals under `source`; they are
    kept for the next flush when the database cannot take them."""
    counts = refusals.take()
    if not counts:
        return
    try:
        await pool.execute(_FLUSH_REFUSALS, source, list(counts), list(counts.values()))
    except Exception:  # noqa: BLE001 (the counts are given back and flushed next time)
        refusals.give_back(counts)


def metrics_runtime(settings: Settings):
    """With PRESSROOM_METRICS_PORT set, a runtime serving Prometheus metrics on /metrics there (as the worker's)."""
    if not settings.metrics_port:
        return None


    return Runtime(telemetry=telemetry(metrics=PrometheusConfig(
        bind_address=f"{settings.metrics_host}:{settings.metrics_port}", durations_as_seconds=True)))



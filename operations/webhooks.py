"""Mailgun's signed webhooks: the receiver (`pressroom webhooks serve`), their registration and status.

The receiver is stateless, any number behind a load balancer. Each POST /webhooks/mailgun is
checked where it enters: the body's size, its JSON, the signature (HMAC-SHA256 of timestamp +
token with MAILGUN_WEBHOOK_SIGNING_KEY, compared in constant time), the timestamp's age, the
event's fields (the same parser as polling), and its token against the tokens already seen. Only
then is it stored, in one statement with its token, in `webhook_inbox` (which NOTIFYs
WebhookInboxWorkflow), and answered 200. Mailgun's contract decides the answers: 200 once the
event is durably stored; 406 ("rejected, do not retry") for a request that cannot be right later
(malformed, forged, stale, replayed, an unusable event: the last one set aside with its reason);
503 when it cannot be stored now, so that Mailgun tries again (for about 8 hours). Every refusal is
one log line without an address, counted by reason in the metrics and in `webhooks status`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from activities.delivery_events import EventBatch, raw_text
from activities.webhooks import INBOX_WORKFLOW_ID, NOTIFY_CHANNEL, InboxInput
from pressroom.settings import Settings, get_settings

if TYPE_CHECKING:
    import asyncpg
    from aiohttp import web

log = logging.getLogger("pressroom.webhooks")

# The configured provider's (pressroom/providers/wiring.py): where its pushes arrive, for the
# commands' texts and the status, which need no signing key.
PROVIDER = "mailgun"
PATH = "/webhooks/mailgun"
REFUSALS_FLUSH_SECONDS = 2.0

# One statement, one round trip, atomic: the token is remembered and the event stored together, or
# neither (a replayed token stores nothing). The NOTIFY is delivered at commit.
_STORE = f"""
WITH token AS (
    INSERT INTO webhook_tokens (provider, token, expires_at) VALUES ($1, $2, to_timestamp($3))
    ON CONFLICT DO NOTHING RETURNING token
), stored AS (
    INSERT INTO webhook_inbox (provider, kind, event) SELECT $1, $4, $5 FROM token RETURNING id
)
SELECT (SELECT count(*) FROM stored) AS stored, pg_notify('{NOTIFY_CHANNEL}', '')"""
_FLUSH_REFUSALS = """
INSERT INTO webhook_refusals AS r (provider, reason, count, last_at)
SELECT $1, reason, n, now() FROM unnest($2::text[], $3::bigint[]) AS t(reason, n)
ON CONFLICT (provider, reason) DO UPDATE SET count = r.count + EXCLUDED.count, last_at = now()"""
_SET_ASIDE_PUSHED = """
INSERT INTO delivery_events_rejected (provider, source, event_id, reason, event, digest)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
ON CONFLICT (provider, digest) DO NOTHING"""


class Refused(Exception):
    """A request answered 406: one line, no address."""


class Receiver:
    """The receiver's state: the pool, the key, and the refusals counted since the last flush."""

    def __init__(self, pool: asyncpg.Pool, settings: Settings, runtime: Any = None) -> None:
        from pressroom.providers.wiring import push_from_settings

        self.pool = pool
        self.push = push_from_settings(settings)
        self.max_age = settings.webhook_max_age_seconds
        self.max_body = settings.webhook_max_body_bytes
        self.refusals: Counter[str] = Counter()
        self.runtime = runtime  # kept: its Prometheus endpoint lives as long as it does
        self._instruments(runtime.metric_meter if runtime is not None else None)

    def _instruments(self, meter: Any) -> None:
        from temporalio.common import MetricMeter

        meter = meter or MetricMeter.noop
        self.requests = meter.create_counter("pressroom_webhooks_requests", "webhook requests by outcome")
        self.store_ms = meter.create_histogram_float("pressroom_webhooks_store", "time to store an event", "ms")

    def app(self) -> web.Application:
        from aiohttp import web

        app = web.Application(client_max_size=self.max_body)
        app.add_routes([web.post(self.push.path, self.receive)])
        return app

    async def receive(self, request: web.Request) -> web.Response:
        from aiohttp import web
        from opentelemetry.trace import SpanKind

        from pressroom import tracing

        path = self.push.path
        with tracing.span(f"POST {path}", {"http.request.method": "POST", "url.path": path,
                                           "webhook.provider": self.push.name}, kind=SpanKind.SERVER) as span:
            try:
                status = await self._receive(request)
            except Refused as refusal:
                status = 406
                self._refused(str(refusal))
            except (OSError, asyncio.TimeoutError) as error:
                status = 503
                self._cannot_store(error)
            except Exception as error:  # asyncpg's errors, a pool closing: Mailgun must try again
                if type(error).__module__.startswith("asyncpg"):
                    status = 503
                    self._cannot_store(error)
                else:
                    raise
            span.set_attribute("http.response.status_code", status)
        return web.Response(status=status, text={200: "stored", 406: "refused", 503: "try again"}[status])

    async def _receive(self, request: web.Request) -> int:
        from aiohttp import web

        if request.content_length is not None and request.content_length > self.max_body:
            raise Refused("body too large")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise Refused("body too large") from None
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):
            raise Refused("body is not JSON") from None
        try:
            pushed = self.push.verify(document, time.time(), self.max_age)
        except ValueError as error:
            raise Refused(str(error)) from None
        item = pushed.item
        raw = raw_text(item)
        event = self.push.parse_event(item)
        if type(event).__name__ == "EventRejected":
            await self._set_aside(item, raw)
            raise Refused(f"event unusable: {event.reason}")
        started = time.monotonic()
        stored = await self.pool.fetchval(_STORE, self.push.name, pushed.token, pushed.timestamp + self.max_age,
                                          event.name, raw)
        self.store_ms.record((time.monotonic() - started) * 1000)
        if not stored:
            raise Refused("token replayed")
        self.requests.with_additional_attributes({"outcome": "stored", "kind": event.name}).add(1)
        return 200

    async def _set_aside(self, item: Any, raw: str) -> None:
        batch = EventBatch()
        batch.add_one(item, self.push.parse_event, raw=raw)
        await self.pool.execute(_SET_ASIDE_PUSHED, *batch.rejected_columns("push"))

    def _refused(self, reason: str) -> None:
        # The reason is ours, without the request's content: never an address.
        kind = reason.split(":", 1)[0]
        self.refusals[kind] += 1
        self.requests.with_additional_attributes({"outcome": "refused", "reason": kind}).add(1)
        log.warning("webhook refused (406): %s", reason)

    def _cannot_store(self, error: BaseException) -> None:
        self.requests.with_additional_attributes({"outcome": "unavailable"}).add(1)
        log.error("webhook not stored (503, Mailgun retries): %s", type(error).__name__)

    async def flush_refusals(self) -> None:
        """Add the refusals counted since the last flush to webhook_refusals; kept for the next on failure."""
        if not self.refusals:
            return
        counts, self.refusals = self.refusals, Counter()
        try:
            await self.pool.execute(_FLUSH_REFUSALS, self.push.name, list(counts), list(counts.values()))
        except Exception:
            self.refusals.update(counts)

    async def flush_refusals_forever(self) -> None:
        while True:
            await asyncio.sleep(REFUSALS_FLUSH_SECONDS)
            await self.flush_refusals()


async def serve(host: str, port: int, settings: Settings | None = None, *, ready=None) -> None:
    """Run the receiver until cancelled (SIGINT/SIGTERM in the command)."""
    from aiohttp import web

    from pressroom import database

    settings = settings or get_settings()
    pool = await database.connect(settings.require_database(), max_size=20)
    receiver = Receiver(pool, settings, metrics_runtime(settings))
    runner = web.AppRunner(receiver.app(), access_log=None, handle_signals=False)
    await runner.setup()
    flusher = asyncio.create_task(receiver.flush_refusals_forever())
    try:
        await web.TCPSite(runner, host, port, backlog=1024).start()
        log.info("webhook receiver on http://%s:%d%s", host, port, PATH)
        if ready is not None:
            ready()
        await asyncio.Event().wait()
    finally:
        flusher.cancel()
        await runner.cleanup()
        await receiver.flush_refusals()
        await pool.close()


def metrics_runtime(settings: Settings):
    """With PRESSROOM_METRICS_PORT set, a runtime serving Prometheus metrics on /metrics there (as the worker's)."""
    if not settings.metrics_port:
        return None
    from temporalio.runtime import PrometheusConfig, Runtime

    from pressroom.temporal import telemetry

    return Runtime(telemetry=telemetry(metrics=PrometheusConfig(
        bind_address=f"{settings.metrics_host}:{settings.metrics_port}", durations_as_seconds=True)))


# --- the inbox's workflow ---------------------------------------------------------------------------

async def ensure_inbox_applier(client, settings: Settings) -> None:
    """The inbox workflow runs (one per namespace and task queue); an existing run is kept."""
    from temporalio.common import WorkflowIDConflictPolicy

    from workflows.webhooks import WebhookInboxWorkflow

    await client.start_workflow(WebhookInboxWorkflow.run, InboxInput(), id=f"{INBOX_WORKFLOW_ID}-{settings.task_queue}",
                                task_queue=settings.task_queue, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                                static_summary="Apply pushed delivery events from the webhook inbox")


# --- registration and status -------------------------------------------------------------------------

def webhook_url(url: str) -> str:
    """A URL Mailgun can call: absolute http(s), a host, no credentials, no spaces, at most 2,000 characters."""
    from urllib.parse import urlsplit

    from pressroom.errors import BadInput

    parts = urlsplit(url) if isinstance(url, str) and len(url) <= 2000 and url.isprintable() and " " not in url \
        else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.username \
            or parts.password:
        # Not echoed: it may hold a password.
        raise BadInput(f"--url is not an absolute http(s) URL without credentials (e.g. https://hooks.example.com{PATH})")
    return url


async def webhooks_setup(url: str, settings: Settings | None = None) -> dict[str, str]:
    """Register `url` for every kind Pressroom applies; answers kind → created / added / unchanged."""
    from pressroom.providers.wiring import provider_from_settings

    url = webhook_url(url)
    settings = settings or get_settings()
    provider = provider_from_settings(settings)
    try:
        return await provider.register_push(url)
    finally:
        await provider.aclose()


async def webhooks_status(settings: Settings | None = None) -> dict:
    """The last event received and applied per kind, the inbox's depth and age, refusals by reason,
    and the pushed events set aside."""
    from pressroom import database

    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        kinds = await conn.fetch("SELECT kind, applied, last_received_at, last_applied_at FROM webhook_kinds "
                                 "WHERE provider = $1 ORDER BY kind", PROVIDER)
        inbox = await conn.fetchrow("SELECT count(*) AS depth, extract(epoch FROM now() - min(received_at)) AS age "
                                    "FROM webhook_inbox")
        refusals = await conn.fetch("SELECT reason, count, last_at FROM webhook_refusals WHERE provider = $1 "
                                    "ORDER BY count DESC, reason", PROVIDER)
        set_aside = await conn.fetchval("SELECT count(*) FROM delivery_events_rejected WHERE source = 'push'")
    return {"kinds": {r["kind"]: {"applied": r["applied"], "last_received_at": r["last_received_at"],
                                  "last_applied_at": r["last_applied_at"]} for r in kinds},
            "inbox": {"depth": inbox["depth"], "oldest_seconds": round(float(inbox["age"]), 3)
                      if inbox["age"] is not None else None},
            "refusals": {r["reason"]: {"count": r["count"], "last_at": r["last_at"]} for r in refusals},
            "set_aside": set_aside}

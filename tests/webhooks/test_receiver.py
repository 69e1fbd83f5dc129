"""The receiver's contract with Mailgun: 200 only once the event is stored, 406 for what must not be
retried (forged, stale, replayed, malformed, unusable), 503 when it cannot store. Real HTTP, real
PostgreSQL."""

from __future__ import annotations

import logging
import time

from operations.webhooks import webhooks_status

from .conftest import delivered, post, signed


async def inbox(db) -> int:
    return await db.fetchval("SELECT count(*) FROM webhook_inbox")


async def test_a_good_request_is_stored_before_200_and_each_bad_one_is_406(db, receiver, webhook_settings,
                                                                           mailgun, caplog, dev_env):
    key = mailgun.webhook_signing_key
    good = signed(delivered(0), key)
    assert await post(receiver.url, good) == 200
    row = await db.fetchrow("SELECT provider, kind, event FROM webhook_inbox")
    assert (row["provider"], row["kind"]) == ("mailgun", "delivered") and "member0@example.com" in row["event"]

    caplog.set_level(logging.WARNING, logger="pressroom.webhooks")
    refused = {
        "token replayed": good,  # the same request again
        "signature does not match": signed(delivered(1), "not-the-key"),
        # Older than the retry window (a retry may carry its first signature: 9 hours by default).
        "timestamp stale": signed(delivered(2), key, timestamp=int(time.time()) - 10 * 3600),
        "timestamp stale (future)": signed(delivered(3), key, timestamp=int(time.time()) + 3600),
        "signature fields malformed": {**signed(delivered(4), key), "signature": {"timestamp": "x", "token": "t",
                                                                               "signature": "zz"}},
        "no signature or no event-data": {"event-data": delivered(5)},
        "event unusable": signed(delivered(6, recipient="member6\x00@example.com"), key),
    }
    for reason, body in refused.items():
        assert await post(receiver.url, body) == 406, reason
    assert await post(receiver.url, None, raw=b'{"signature": ') == 406
    assert await post(receiver.url, None, raw=b"[" * 100_000 + b"]" * 100_000) == 406  # nested past the parser
    big = signed(delivered(7, padding="x" * (webhook_settings.webhook_max_body_bytes + 1)), key)
    assert await post(receiver.url, big) == 406
    assert await inbox(db) == 1  # nothing refused was stored

    # One line per reason (a second one within seconds is held back, and counted), never the address.
    lines = [r.getMessage() for r in caplog.records if r.name == "pressroom.webhooks"]
    assert len(lines) == 8  # the 10 refusals, two reasons twice
    assert all("example.com" not in line and "\n" not in line for line in lines)
    assert any("body too large" in line for line in lines) and any("body is not JSON" in line for line in lines)

    # The unusable event is set aside as a pushed one; refusals are counted by reason.
    assert await db.fetchval("SELECT source FROM delivery_events_rejected") == "push"
    await receiver.receiver.flush_refusals()
    status = await webhooks_status(webhook_settings)
    counts = {reason: value["count"] for reason, value in status["refusals"].items()}
    assert counts == {"token replayed": 1, "signature does not match": 1, "timestamp stale": 2,
                      "signature fields malformed": 1, "no signature or no event-data": 1, "event unusable": 1,
                      "body is not JSON": 2, "body too large": 1}
    assert status["inbox"]["depth"] == 1 and status["inbox"]["oldest_seconds"] >= 0
    assert status["set_aside"] == 1

    from tests.operations.test_waiting import cli, cli_env
    code, out, err = await cli("webhooks", "status", env=cli_env(webhook_settings, dev_env))
    assert code == 0, err
    assert "inbox: 1 waiting" in out and "refused:       2 timestamp stale" in out and "example.com" not in out


async def test_a_database_that_cannot_store_gets_503_so_mailgun_retries(db, receiver, mailgun):
    await receiver.receiver.pool.close()  # the database is gone for this receiver
    assert await post(receiver.url, signed(delivered(0), mailgun.webhook_signing_key)) == 503
    assert await inbox(db) == 0


async def test_the_receiver_is_traced_and_counted_without_addresses(db, webhook_settings, mailgun):
    """A span per request with its statement under it, and Prometheus metrics by outcome (the
    receiver's own runtime, as `webhooks serve` makes it with PRESSROOM_METRICS_PORT)."""
    import httpx
    from aiohttp import web
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from devstack.servers import free_port
    from frontdoor.receiver import Receiver, metrics_runtime
    from pressroom.providers.mailgun import MailgunPush

    PATH = MailgunPush.path
    from pressroom import database, tracing, tracing_export

    exporter = InMemorySpanExporter()
    tracing_export.configure(SimpleSpanProcessor(exporter))
    metrics_port = free_port()
    pool = await database.connect(webhook_settings.database_url, max_size=2)
    receiver = Receiver(pool, webhook_settings, metrics_runtime(webhook_settings.model_copy(
        update={"metrics_port": metrics_port})))
    runner = web.AppRunner(receiver.app(), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        url = f"http://127.0.0.1:{port}{PATH}"
        assert await post(url, signed(delivered(0), mailgun.webhook_signing_key)) == 200
        assert await post(url, signed(delivered(1), "forged")) == 406
        spans = exporter.get_finished_spans()
        roots = [s for s in spans if s.name == f"POST {PATH}"]
        assert [r.attributes["http.response.status_code"] for r in roots] == [200, 406]
        assert any(s.parent is not None and s.parent.span_id == roots[0].context.span_id for s in spans)
        assert all("example.com" not in str(dict(s.attributes or {})) for s in spans)
        from .conftest import eventually

        async def scraped():
            try:
                async with httpx.AsyncClient() as http:
                    text = (await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
                return text if "pressroom_webhooks_requests" in text else None
            except httpx.TransportError:
                return None  # the endpoint opens a moment after the runtime is made
        text = await eventually(scraped, seconds=30)
        assert text, "no metrics served"
        lines = [line for line in text.splitlines() if line.startswith("pressroom_webhooks_requests{")]
        assert any('kind="delivered"' in line and 'outcome="stored"' in line and line.endswith(" 1") for line in lines)
        assert any('reason="signature does not match"' in line and 'outcome="refused"' in line
                   and line.endswith(" 1") for line in lines)
        assert "pressroom_webhooks_store" in text and "example.com" not in text
    finally:
        tracing.disable()
        await runner.cleanup()
        await pool.close()

"""Deliverability: how soon a bounce storm pauses a send, and how soon a send goes on after the
provider's recovery (not a test).

    .venv/bin/python bench/deliverability.py                      # 10,000 members, outages of 5 and 30 min
    .venv/bin/python bench/deliverability.py --outages 60 --members 3000

The pause: N members of whom 5% hard-bounce in the Mailgun simulator, batches of 100, two at a
time, the simulator answering each call in 200 ms and pushing its events to a receiver as Mailgun
does; the send pauses at 4% (PRESSROOM_PAUSE_HARD_BOUNCE_RATE, below the true 5% so the bench
measures the reaction, not a coin flip) once 1,000 recipients are answered. Printed: the batches
sent by the time 1,000 recipients were sent (the earliest the pause could judge), the batches sent
when it paused, and the seconds between.

The return: Mailgun unreachable (a proxy that refuses connections) for each outage length while a
send waits; printed: seconds from the proxy's reopening to the next batch accepted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aiohttp import web

from bench.servers import bench_servers
from devstack.mailgun_simulator import running_simulator
from devstack.servers import free_port
from frontdoor.receiver import Receiver
from operations.webhooks import ensure_inbox_applier, webhooks_setup
from pressroom import database
from pressroom.providers.mailgun import MailgunPush
from pressroom.settings import load_settings
from tests.newsletter.conftest import seed_email
from tests.newsletter.test_mailgun_outage import Gate
from worker import running_worker
from workflows.newsletter import SendNewsletterWorkflow
from workflows.newsletter_models import SendNewsletterInput, newsletter_workflow_id


def settings_for(servers, simulator, **overrides):
    return load_settings(database_url=servers.database_url, mailgun_base_url=simulator.base_url,
                         mailgun_api_key=simulator.api_key, mailgun_domain=simulator.domain,
                         webhook_signing_key=simulator.webhook_signing_key, members_link_secret="bench-secret",
                         task_queue=f"bench-{uuid.uuid4().hex[:8]}",
                         temporal_address=servers.env.client.service_client.config.target_host, **overrides)


async def measure_pause(servers, members: int) -> None:
    async with running_simulator() as simulator:
        settings = settings_for(servers, simulator, batch_size=100, send_concurrency=2, pause_min_answered=1000,
                                pause_hard_bounce_rate=0.04, reputation_check_seconds=1.0)
        pool = await database.connect(settings.database_url, max_size=10)
        receiver = Receiver(pool, settings)
        runner = web.AppRunner(receiver.app(), access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            await webhooks_setup(f"http://127.0.0.1:{port}{MailgunPush.path}", settings)
            seeded = await seed_email(pool, members=members)
            simulator.set_rates(failed_permanent=0.05)
            simulator.set_faults(latency_ms=200)
            client = servers.env.client
            async with running_worker(client, settings):
                await ensure_inbox_applier(client, settings)
                started = time.monotonic()
                handle = await client.start_workflow(
                    SendNewsletterWorkflow.run, SendNewsletterInput(email_id=seeded.email_id),
                    id=newsletter_workflow_id(seeded.email_id), task_queue=settings.task_queue)
                sample_at: float | None = None
                sample_batches = 0
                while True:
                    progress = await handle.query(SendNewsletterWorkflow.progress)
                    if sample_at is None and progress.recipients_sent >= settings.pause_min_answered:
                        sample_at, sample_batches = time.monotonic(), progress.batches_sent
                    if progress.status in ("paused", "submitted", "failed"):
                        break
                    await asyncio.sleep(0.05)
                paused_at = time.monotonic()
                print(f"pause ({members:,} members, 5% hard bounces, pause at 4% from 1,000 answered): "
                      f"{progress.status} after {progress.batches_sent} of {progress.batches_total} batches "
                      f"({progress.recipients_sent:,} recipients) in {paused_at - started:.1f} s; "
                      f"1,000 sent by batch {sample_batches}; {progress.batches_sent - sample_batches} batches "
                      f"and {paused_at - (sample_at or paused_at):.1f} s after; {progress.message}", flush=True)
                await handle.cancel()
        finally:
            await runner.cleanup()
            await pool.close()


async def measure_return(servers, outage: float) -> None:
    async with running_simulator() as simulator:
        gate = Gate(simulator.base_url)
        settings = settings_for(servers, simulator, batch_size=10, send_concurrency=2, provider_retries=1,
                                provider_retry_seconds=1).model_copy(update={"mailgun_base_url": gate.url})
        pool = await database.connect(settings.database_url, max_size=5)
        try:
            seeded = await seed_email(pool, members=40)
            client = servers.env.client
            async with running_worker(client, settings):
                handle = await client.start_workflow(
                    SendNewsletterWorkflow.run, SendNewsletterInput(email_id=seeded.email_id),
                    id=newsletter_workflow_id(seeded.email_id), task_queue=settings.task_queue)
                await asyncio.sleep(outage)  # Mailgun unreachable from the start
                await gate.open()
                back = time.monotonic()
                while True:
                    if (await handle.query(SendNewsletterWorkflow.progress)).batches_sent:
                        break
                    await asyncio.sleep(0.05)
                print(f"return after a {outage:.0f} s outage: first batch accepted {time.monotonic() - back:.1f} s "
                      f"after Mailgun answered again (looking every {settings.provider_probe_seconds:.0f} s)",
                      flush=True)
                await handle.result()
        finally:
            await gate.shut()
            await pool.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--outages", default="300,1800", help="outage lengths in seconds, comma-separated")
    args = parser.parse_args()
    async with bench_servers() as servers:
        await measure_pause(servers, args.members)
        for outage in (float(value) for value in args.outages.split(",") if value):
            await measure_return(servers, outage)


if __name__ == "__main__":
    asyncio.run(main())

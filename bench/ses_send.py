"""Benchmark: one newsletter to N members through SES's stand-in, beside raw calls to it (not a test).

Starts its own PostgreSQL and Temporal dev server, and the SES stand-in in this process; seeds N
members and times SendNewsletterWorkflow from start to "email submitted" with
PRESSROOM_EMAIL_PROVIDER=ses (batches of 50: SES's destinations per SendBulkEmail call). Next to it,
in the same run, the raw figure: the same N/50 SendBulkEmail calls, signed the same way (botocore's
SigV4), posted straight to the stand-in at the same concurrency. No faults and no pushes: this
measures sending; the exactly-once cases are tests/newsletter/test_send_ses.py.

    .venv/bin/python bench/ses_send.py --members 100000 --concurrency 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.newsletter import SEED
from bench.servers import bench_servers
from devstack.ses_simulator import running_ses_simulator
from operations.newsletter import follow_newsletter, start_newsletter
from pressroom import database
from pressroom.providers.ses import SesClient
from pressroom.providers.ses.settings import ses_settings
from pressroom.settings import load_settings
from worker import running_worker, tune_garbage_collection

PER_CALL = 50


async def raw_calls(client: SesClient, members: int, concurrency: int) -> float:
    """N/50 signed SendBulkEmail calls, `concurrency` at a time, with bodies built beforehand."""
    slots = asyncio.Semaphore(concurrency)
    calls = (members + PER_CALL - 1) // PER_CALL
    shared = {"FromEmailAddress": "news@example.com", "ConfigurationSetName": client.configuration_set,
              "DefaultContent": {"Template": {"TemplateContent": {"Subject": "Raw", "Html": "<p>Hello {{{name}}}</p>",
                                                                  "Text": "Hello"}, "TemplateData": "{}"}},
              "DefaultEmailTags": [{"Name": "email-id", "Value": "raw"}]}
    bodies = [{**shared, "BulkEmailEntries": [
        {"Destination": {"ToAddresses": [f"raw{number}-{n}@example.com"]},
         "ReplacementEmailContent": {"ReplacementTemplate": {"ReplacementTemplateData": json.dumps({"name": "M"})}}}
        for n in range(min(PER_CALL, members - number * PER_CALL))]} for number in range(calls)]

    async def call(body) -> None:
        async with slots:
            await client._request("POST", "/v2/email/outbound-bulk-emails", what="raw call", body=body)

    started = time.perf_counter()
    await asyncio.gather(*(call(body) for body in bodies))
    return time.perf_counter() - started


async def main(args: argparse.Namespace) -> None:
    async with bench_servers() as servers, running_ses_simulator() as ses:
        # A quota above the send: its caps admit every batch (as in production) and never wait.
        ses.max_24_hour_send, ses.max_send_rate = 10_000_000.0, 10_000.0
        os.environ.update({"AWS_REGION": ses.region, "AWS_ACCESS_KEY_ID": ses.access_key_id,
                           "AWS_SECRET_ACCESS_KEY": ses.secret_access_key, "PRESSROOM_SES_DOMAIN": ses.domain,
                           "PRESSROOM_SES_CONFIGURATION_SET": ses.configuration_set,
                           "PRESSROOM_SES_ENDPOINT_URL": ses.base_url})
        ses_settings.cache_clear()
        settings = load_settings(database_url=servers.database_url, email_provider="ses",
                                 send_concurrency=args.concurrency, task_queue="bench-ses")
        pool = await database.connect(servers.database_url, max_size=4)
        await pool.execute(SEED.format(members=args.members, tag="s"))
        async with SesClient.from_settings(ses_settings()) as client:
            raw = await raw_calls(client, args.members, args.concurrency)
        raw_copies = len(ses.delivered)
        ses.delivered.clear()
        async with running_worker(servers.env.client, settings):
            started = time.perf_counter()
            start = await start_newsletter("e1", client=servers.env.client, settings=settings)
            outcome = await follow_newsletter(start.workflow_id, client=servers.env.client, poll_seconds=0.2)
            pipeline = time.perf_counter() - started
        copies = len(ses.delivered)
        duplicates = copies - len({copy.address for copy in ses.delivered})
        await pool.close()
    n = args.members
    print(f"newsletter send through the SES stand-in: N={n:,} members, {PER_CALL} a call, "
          f"concurrency {args.concurrency}")
    print(f"  pipeline (start → submitted)  {pipeline:7.2f} s  {n / pipeline:>10,.0f} recipients/s  "
          f"({outcome.status}, {outcome.counts.batches_submitted} batches, {copies:,} copies, "
          f"{duplicates} duplicates)")
    print(f"  raw {(n + PER_CALL - 1) // PER_CALL} SendBulkEmail calls  {raw:7.2f} s  {n / raw:>10,.0f} "
          f"recipients/s  ({raw_copies:,} copies)")
    print(f"  pipeline / raw: {pipeline / raw:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=10)
    tune_garbage_collection()
    asyncio.run(main(parser.parse_args()))

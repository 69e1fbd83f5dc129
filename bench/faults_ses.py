"""Fault matrix through SES: does every member get each email exactly once? (not a test)

`bench/faults.py --provider ses` runs this. PostgreSQL and a Temporal dev server of its own; in
this process the SES stand-in and the webhook receiver (PRESSROOM_EMAIL_PROVIDER=ses), subscribed
to the stand-in's topic, its notifications pushed as they become visible; workers as processes of
their own, one per row:

    {throttling + 5xx before and after accepting, lost answers, kill -9 of the worker mid-send,
     destinations throttled one by one in accepted calls (sent again in new batches)}
  × {stand-in faithful, notifications 45 s late, notifications duplicated and reordered}
  + lost answers with no retries, then `newsletter send` again

SES has no events API: every uncertain send is confirmed from the Send events the receiver kept.
Counted from what the stand-in accepted: eligible / received / missing / duplicates / status.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: the repository's packages

from bench.faults import CONFIRM_WINDOW_SECONDS, LATE_SECONDS, ROOT, Matrix, Row
from bench.servers import bench_servers
from devstack.servers import free_port
from devstack.ses_simulator import SesSimulator, running_ses_simulator
from frontdoor.receiver import Receiver
from pressroom import database
from pressroom.providers.ses import SesClient
from pressroom.providers.ses.settings import ses_settings
from pressroom.settings import load_settings

ADVERSARIES = {"faithful": {}, "events 45 s late": {"events_delay": LATE_SECONDS},
               "pushes doubled, reordered": {"duplicate_pushes": True, "reorder_pushes": True}}
ERRORS = {"throttled": 5, "server_errors": 3, "errors_after_accept": 3}
LOST = {"lost_answers": 6}
OFF = {"throttled": 0, "throttled_destinations": 0, "server_errors": 0, "errors_after_accept": 0, "lost_answers": 0,
       "events_delay": 0.0, "duplicate_pushes": False, "reorder_pushes": False, "latency_ms": 0.0}


def print_row(row: Row) -> None:
    print(f"| {row.case:<38} | {row.adversary:<25} | {row.eligible:>8,} | {row.received:>8,} | {row.missing:>7,} "
          f"| {row.duplicates:>10,} | {row.status:<10} | {row.seconds:>7.1f} |", flush=True)


class SesMatrix(Matrix):
    QUEUE = "faults-ses"
    LOST_ANSWERS = {"lost_answers": 1_000_000}

    def __init__(self, servers, ses: SesSimulator, members: int, environment: dict[str, str]) -> None:
        self.servers, self.ses, self.members, self.environment = servers, ses, members, environment
        self.rows = 0

    def settings(self, queue: str):
        return load_settings(database_url=self.servers.database_url, email_provider="ses", task_queue=queue,
                             members_link_secret="bench-link-secret")

    def worker(self, queue: str, **extra: str) -> subprocess.Popen:
        env = {**os.environ, **self.environment, "DATABASE_URL": self.servers.database_url,
               "TEMPORAL_ADDRESS": self.servers.env.client.service_client.config.target_host,
               "PRESSROOM_TASK_QUEUE": queue, "PRESSROOM_EMAIL_PROVIDER": "ses", "PRESSROOM_SEND_CONCURRENCY": "4",
               "PRESSROOM_MEMBERS_LINK_SECRET": "bench-link-secret",
               "PRESSROOM_PROVIDER_RETRY_SECONDS": "1",
               "PRESSROOM_SEND_CONFIRM_WINDOW_SECONDS": str(CONFIRM_WINDOW_SECONDS),
               "PRESSROOM_SEND_CONFIRM_POLL_SECONDS": "5", **extra}
        return subprocess.Popen([sys.executable, "-m", "worker"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    def faults(self, adversary: str, **faults) -> None:
        self.ses.set_faults(**{**OFF, **faults, **ADVERSARIES[adversary]})

    def reset(self) -> None:
        pass  # the stand-in's accepted copies are told apart by each row's email id

    def delivered(self, email_id: str) -> Counter:
        return Counter(copy.address for copy in self.ses.delivered if copy.tags.get("email-id") == email_id)


async def run(members: int, cases: list[str] | None = None) -> None:
    async with bench_servers() as servers, running_ses_simulator() as ses:
        ses.identities["example.com"] = True  # the seeded newsletters' sender, news@example.com, is verified
        folder = Path(tempfile.mkdtemp(prefix="pressroom-ses-faults-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)  # the stand-in's certificate, gone with the run
        (folder / "sns.pem").write_bytes(ses.certificate_pem)
        environment = {"AWS_REGION": ses.region, "AWS_ACCESS_KEY_ID": ses.access_key_id,
                       "AWS_SECRET_ACCESS_KEY": ses.secret_access_key, "PRESSROOM_SES_DOMAIN": ses.domain,
                       "PRESSROOM_SES_CONFIGURATION_SET": ses.configuration_set,
                       "PRESSROOM_SES_TOPIC_ARN": ses.topic_arn, "PRESSROOM_SES_ENDPOINT_URL": ses.base_url,
                       "PRESSROOM_SES_SNS_ENDPOINT_URL": f"{ses.base_url}/sns",
                       "PRESSROOM_SES_SNS_DEV_CERTIFICATE": str(folder / "sns.pem")}
        os.environ.update(environment)
        ses_settings.cache_clear()
        pool = await database.connect(servers.database_url, max_size=4)
        receiver = Receiver(pool, load_settings(database_url=servers.database_url, email_provider="ses"))
        runner = web.AppRunner(receiver.app(), access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        async with SesClient.from_settings(ses_settings()) as client:
            await client.register_push(f"http://127.0.0.1:{port}/webhooks/ses")
        while not all(s["confirmed"] for s in ses.subscriptions.values()):
            await asyncio.sleep(0.05)
        pusher = asyncio.create_task(ses.push_forever())
        matrix = SesMatrix(servers, ses, members, environment)
        print(f"fault matrix through SES: {members:,} members per email, batches of 50, 4 at a time; confirm "
              f"window {CONFIRM_WINDOW_SECONDS} s, looked up every 5 s; late notifications {LATE_SECONDS} s")
        print(f"| {'case':<38} | {'adversary':<25} | eligible | received | missing | duplicates | {'status':<10} "
              f"| seconds |")
        rows = []
        try:
            for case, faults, kill in (("throttled + 5xx", ERRORS, False), ("lost answers", LOST, False),
                                       ("kill -9 of the worker mid-send", {"latency_ms": 300}, True),
                                       # half the members, at odd places of their calls: ACCOUNT_THROTTLED
                                       ("destinations throttled", {"throttled_destinations": members // 2}, False)):
                if cases and case not in cases:
                    continue
                for adversary in ADVERSARIES:
                    rows.append(await matrix.send(pool, case, adversary, faults, kill=kill))
                    print_row(rows[-1])
            if not cases or "send again" in cases:
                rows.append(await matrix.send_again(pool, "pushes doubled, reordered"))
                print_row(rows[-1])
        finally:
            pusher.cancel()
            await runner.cleanup()
            await pool.close()
        bad = [r for r in rows if r.missing or r.duplicates or r.status != "submitted"]
        print(f"{len(rows) - len(bad)} of {len(rows)} rows exactly once" + (f"; NOT: {bad}" if bad else ""))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=500)
    parser.add_argument("--case", action="append", help="run only this case (repeatable; "
                        "e.g. 'destinations throttled', 'send again')")
    arguments = parser.parse_args()
    asyncio.run(run(arguments.members, arguments.case))

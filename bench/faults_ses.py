"""Fault matrix through SES: does every member get each email exactly once? (not a test)

    .venv/bin/python bench/faults_ses.py --members 300 [--case "lost answers"] [--adversary "events 45 s late"]

PostgreSQL and a Temporal dev server of its own; in this process the SES stand-in and the webhook
receiver (PRESSROOM_EMAIL_PROVIDER=ses), subscribed to the stand-in's topic, its notifications
pushed as they become visible; workers as processes of their own, one per row:

    {throttling + 5xx before and after accepting, lost answers, kill -9 of the worker mid-send,
     destinations throttled one by one in accepted calls (sent again in new batches)}
  × {stand-in faithful, notifications 45 s late, notifications duplicated and reordered}
  + lost answers with no retries, then `newsletter send` again

SES has no events API: every uncertain send is confirmed from the Send events the receiver kept.
Counted from what the stand-in accepted: eligible / received / missing / duplicates / status, and
the lateness of the row's Send notifications: the latest stored by the receiver, in seconds after
the stand-in accepted its copy (`provider_acceptances.received_at - accepted_at`), against the
confirm window.

The confirm window is scaled down from production's 30 minutes so that the matrix runs in minutes;
it must still exceed the notifications' worst lateness, or a row measures the stand-in rather than
the send: a batch not found within the window is sent again, as designed. That lateness is the
stand-in's delay plus its push lag: it pushes one notification at a time (a Send and a Delivery
per copy, 600 for a row of 300 members, twice that doubled), each signed and received in this one
process, 12-19 ms a push at load 7 and more as the load grows, so the last Send of a row is stored
seconds to tens of seconds after it became visible (`git show a4c9fbd:bench/NOTES-round-five-send.md`,
"Exactly once"). The window here is the delay plus PUSH_LAG_ALLOWANCE; a row whose latest notification came
later than the window is named at the end (it does not measure the send).
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: the repository's packages

from bench.faults import LATE_SECONDS, ROOT, Matrix, Row
from bench.servers import bench_servers
from devstack.servers import free_port
from devstack.ses_simulator import SesSimulator, running_ses_simulator
from frontdoor.receiver import Receiver
from pressroom import database
from pressroom.providers.ses import SesClient
from pressroom.providers.ses.settings import ses_settings
from pressroom.settings import load_settings

# How far past its delay the stand-in's serial pushes may reach the receiver on a loaded machine
# (measured at 300 members: up to 32 s at load 15-25), and the window that covers both.
PUSH_LAG_ALLOWANCE = 45
CONFIRM_WINDOW_SECONDS = LATE_SECONDS + PUSH_LAG_ALLOWANCE
# The latest of an email's Send notifications stored by the receiver, in seconds after its copy was accepted.
LATEST_STORED = """
SELECT max(extract(epoch FROM received_at - accepted_at))::float8 FROM provider_acceptances
WHERE provider = 'ses' AND marks @> jsonb_build_object('email-id', $1::text)"""
ADVERSARIES = {"faithful": {}, "events 45 s late": {"events_delay": LATE_SECONDS},
               "pushes doubled, reordered": {"duplicate_pushes": True, "reorder_pushes": True}}
ERRORS = {"throttled": 5, "server_errors": 3, "errors_after_accept": 3}
LOST = {"lost_answers": 6}
OFF = {"throttled": 0, "throttled_destinations": 0, "server_errors": 0, "errors_after_accept": 0, "lost_answers": 0,
       "events_delay": 0.0, "duplicate_pushes": False, "reorder_pushes": False, "latency_ms": 0.0}


@dataclass
class SesRow(Row):
    latest_stored: float | None  # seconds after acceptance, of the row's latest stored Send notification


def print_row(row: SesRow) -> None:
    latest = "-"
    if row.latest_stored is not None:  # and the push lag: past the stand-in's delay
        lag = row.latest_stored - ADVERSARIES[row.adversary].get("events_delay", 0)
        latest = f"{row.latest_stored:.1f} ({lag:.1f})"
    print(f"| {row.case:<38} | {row.adversary:<25} | {row.eligible:>8,} | {row.received:>8,} | {row.missing:>7,} "
          f"| {row.duplicates:>10,} | {row.status:<10} | {row.seconds:>7.1f} | {latest:>21} |", flush=True)


class SesMatrix(Matrix):
    QUEUE = "faults-ses"
    LOST_ANSWERS: ClassVar[dict[str, int]] = {"lost_answers": 1_000_000}

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

    async def count(self, pool, case: str, adversary: str, email_id: str, started: float) -> SesRow:
        row = await super().count(pool, case, adversary, email_id, started)
        await self.all_pushed(email_id)
        return SesRow(**asdict(row), latest_stored=await pool.fetchval(LATEST_STORED, email_id))

    async def all_pushed(self, email_id: str, timeout: float = 300) -> None:
        """Until every Send notification of the email is pushed, so that the row's lateness counts
        them all (those of second copies come after the send has ended)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.ses.unpushed(email_id) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.2)
        if left := self.ses.unpushed(email_id):
            print(f"({left} Send notifications of {email_id} not pushed after {timeout:.0f} s: the row's "
                  "lateness counts only those stored)", flush=True)


async def run(members: int, cases: list[str] | None = None, adversaries: list[str] | None = None) -> None:
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
              f"window {CONFIRM_WINDOW_SECONDS} s (late notifications {LATE_SECONDS} s + {PUSH_LAG_ALLOWANCE} s "
              "for the stand-in's push lag), looked up every 5 s; 'latest stored': the row's last Send "
              "notification kept by the receiver, seconds after its copy was accepted (its push lag past the delay)")
        print(f"| {'case':<38} | {'adversary':<25} | eligible | received | missing | duplicates | {'status':<10} "
              f"| seconds | latest stored (lag) |")
        rows = []
        try:
            for case, faults, kill in (("throttled + 5xx", ERRORS, False), ("lost answers", LOST, False),
                                       ("kill -9 of the worker mid-send", {"latency_ms": 300}, True),
                                       # half the members, at odd places of their calls: ACCOUNT_THROTTLED
                                       ("destinations throttled", {"throttled_destinations": members // 2}, False)):
                if cases and case not in cases:
                    continue
                for adversary in ADVERSARIES:
                    if adversaries and adversary not in adversaries:
                        continue
                    rows.append(await matrix.send(pool, case, adversary, faults, kill=kill))
                    print_row(rows[-1])
            if (not cases or "send again" in cases) and (not adversaries or "pushes doubled, reordered" in adversaries):
                rows.append(await matrix.send_again(pool, "pushes doubled, reordered"))
                print_row(rows[-1])
        finally:
            pusher.cancel()
            await runner.cleanup()
            await pool.close()
        bad = [r for r in rows if r.missing or r.duplicates or r.status != "submitted"]
        print(f"{len(rows) - len(bad)} of {len(rows)} rows exactly once" + (f"; NOT: {bad}" if bad else ""))
        late = [r for r in rows if r.latest_stored is not None and r.latest_stored >= CONFIRM_WINDOW_SECONDS]
        worst = max((r.latest_stored for r in rows if r.latest_stored is not None), default=None)
        print(f"notifications stored at most {worst or 0:.1f} s after acceptance against a window of "
              f"{CONFIRM_WINDOW_SECONDS} s" + (f"; later than the window in {len(late)} rows, which measure the "
                                               f"stand-in's lag, not the send: {[(r.case, r.adversary) for r in late]}"
                                               if late else ""))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=500)
    parser.add_argument("--case", action="append", help="run only this case (repeatable; "
                        "e.g. 'destinations throttled', 'send again')")
    parser.add_argument("--adversary", action="append", choices=list(ADVERSARIES),
                        help="run only the rows of this adversary (repeatable)")
    arguments = parser.parse_args()
    asyncio.run(run(arguments.members, arguments.case, arguments.adversary))

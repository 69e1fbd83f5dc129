"""Capture the workflow histories of this release, for the replay test of every later release.

    .venv/bin/python tests/histories/capture.py            # writes tests/histories/<version>/
    .venv/bin/python tests/histories/capture.py --only webhooks --version 0.5.0   # one job, kept beside the rest

It starts its own servers from the project's wheels (PostgreSQL, the Temporal dev server with an
early continue-as-new suggestion, the Mailgun simulator), seeds a small site, drives every
workflow type into the states that matter — mid-way, continued as new, refused, waiting days
ahead, moved, cancelled, published, retrying, aborted — and exports each history with
`temporal workflow show --output json`, the format operators also get from the CLI.

Running histories are captured as they stand (a replay of a partial history is exactly what a new
worker does with a run in flight). `manifest.json` names the workflow id of every file, which the
replay needs, and what state it shows. No member address is stored: the script checks.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from contextlib import AsyncExitStack, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from devstack.mailgun_simulator import MailgunSimulator
from devstack.servers import Postgres, find_binary, free_port
from operations.demo_site import DemoSite, seed_site
from pressroom import database
from pressroom.settings import load_settings
from pressroom.temporal import SEARCH_ATTRIBUTES, data_converter
from worker import running_worker

SIMULATOR_KEY, SIMULATOR_DOMAIN = "key-capture-00000000", "mg.capture.example"
# A run of an automation (send, wait, send) at its wait: its first step done, its second reached.
AT_ITS_WAIT = ("SELECT count(*) = 2 FROM automation_run_steps s JOIN automation_runs r ON r.id = s.run_id "
               "WHERE r.idempotency_key = $1")
ADDRESS = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")


class Capture:
    def __init__(self, client: Client, address: str, pool, simulator: MailgunSimulator, database_url: str,
                 out: Path) -> None:
        self.client, self.address, self.pool, self.sim = client, address, pool, simulator
        self.database_url, self.out = database_url, out
        self.manifest: dict[str, dict[str, str]] = {}

    def settings(self, name: str, **overrides):
        return load_settings(database_url=self.database_url, mailgun_base_url=self.sim.base_url,
                             mailgun_api_key=self.sim.api_key, mailgun_domain=self.sim.domain,
                             task_queue=f"capture-{name}", analytics_end_margin_seconds=0,
                             members_link_secret="capture-link-secret",
                             from_address="Pressroom <noreply@capture.example>",
                             **{"send_confirm_window_seconds": 3, "send_confirm_poll_seconds": 0.5, **overrides})

    def save(self, name: str, workflow_id: str, run_id: str | None, state: str) -> None:
        """Export one run's history exactly as `temporal workflow show --output json` prints it."""
        command = [find_binary("temporal"), "workflow", "show", "--workflow-id", workflow_id, "--output", "json",
                   "--address", self.address, "--namespace", "default"]
        if run_id:
            command += ["--run-id", run_id]
        text = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        workflow_type = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"]["workflowType"]["name"]
        if leaked := ADDRESS.findall(text):
            raise SystemExit(f"{name}: the history holds an address ({len(leaked)} found); refusing to store it")
        (self.out / f"{name}.json").write_text(text)
        self.manifest[name] = {"workflow_id": workflow_id, "workflow_type": workflow_type, "state": state}
        print(f"  {name}: {workflow_type}, {len(json.loads(text)['events'])} events — {state}")

    async def published_site(self, run_tag: str) -> DemoSite:
        """A seeded site whose post is published: only a published post's email is sent."""
        site = await seed_site(self.pool, members=120, run_tag=run_tag)
        await self.pool.execute("UPDATE posts SET status = 'published', published_at = now() WHERE id = $1",
                                site.post_id)
        return site

    async def until(self, query: str, *args, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not await self.pool.fetchval(query, *args):
            if time.monotonic() > deadline:
                raise SystemExit(f"waited {timeout:.0f} s for: {query}")
            await asyncio.sleep(0.1)

    # --- newsletter ---

    async def newsletters(self) -> None:
        from operations.newsletter import start_newsletter
        from workflows.newsletter import SendNewsletterWorkflow

        # Mid-way: slow answers, one batch at a time; captured once two of six batches are sent.
        settings = self.settings("newsletter-midway", batch_size=20, send_concurrency=1)
        site = await self.published_site("midway")
        async with running_worker(self.client, settings):
            self.sim.set_faults(latency_ms=700)
            start = await start_newsletter(site.email_id, client=self.client, settings=settings)
            await self.until("SELECT count(*) >= 2 FROM email_batches WHERE email_id = $1 AND status = 'submitted'",
                             site.email_id)
            self.save("newsletter-midway", start.workflow_id, None, "running: 2 of 6 batches sent, more in flight")
            self.sim.set_faults(latency_ms=0)
            await self.client.get_workflow_handle(start.workflow_id).result()
            self.save("newsletter-submitted", start.workflow_id, None, "completed: every batch sent, email submitted")

        # Continued as new: 120 batches of one; the server suggests continue-as-new after 200 events.
        settings = self.settings("newsletter-continued", batch_size=1, send_concurrency=10)
        site = await self.published_site("continued")
        async with running_worker(self.client, settings):
            start = await start_newsletter(site.email_id, client=self.client, settings=settings)
            await self.client.get_workflow_handle(start.workflow_id).result()
            self.save("newsletter-continued", start.workflow_id, start.run_id,
                      "first run: 100 batches sent, then continued as new")
            self.save("newsletter-continued-last-run", start.workflow_id, None,
                      "the continued run: the remaining batches, email submitted")

        # Refused at the lock: the email does not exist.
        settings = self.settings("newsletter-refused")
        async with running_worker(self.client, settings):
            handle = await self.client.start_workflow(
                SendNewsletterWorkflow.run, {"email_id": "no-such-email"}, id="newsletter-no-such-email",
                task_queue=settings.task_queue)
            with suppress(Exception):
                await handle.result()
            self.save("newsletter-refused", handle.id, None, "failed: the email does not exist")

        # A batch refused by Mailgun (an address it rejects, changed after the batches were written):
        # the batch fails, the email ends failed.
        from tests.newsletter.conftest import refused_by_mailgun

        settings = self.settings("newsletter-batch-refused", batch_size=60)
        site = await self.published_site("batch-refused")
        await refused_by_mailgun(self.pool, settings, site.email_id)
        async with running_worker(self.client, settings):
            start = await start_newsletter(site.email_id, client=self.client, settings=settings)
            await self.client.get_workflow_handle(start.workflow_id).result()
            self.save("newsletter-batch-refused", start.workflow_id, None,
                      "completed: one batch refused by Mailgun (400), email failed")

    async def newsletter_limits(self) -> None:
        """States that exist from 0.2.0 on: confirming an uncertain batch, splitting a batch refused for
        its size, waiting for a daily cap."""
        from operations.newsletter import start_newsletter

        # Lost answers and events stored late: the batches are uncertain and wait on a timer.
        settings = self.settings("newsletter-confirming", batch_size=60, send_confirm_window_seconds=120)
        site = await self.published_site("confirming")
        async with running_worker(self.client, settings):
            # Events stored later than the send's retry: its look-up finds nothing yet and it waits aside.
            self.sim.set_faults(lost_response_rate=1.0, storage_delay_seconds=20)
            start = await start_newsletter(site.email_id, client=self.client, settings=settings)
            await self.until("SELECT count(*) >= 1 FROM email_batches WHERE email_id = $1 AND status = 'submitting'",
                             site.email_id)
            await asyncio.sleep(2)
            self.save("newsletter-confirming", start.workflow_id, None,
                      "running: answers lost, the batches' events not visible yet, confirming on a timer")
            self.sim.set_faults(lost_response_rate=0.0)
            await self.client.get_workflow_handle(start.workflow_id).result()
            self.sim.set_faults(storage_delay_seconds=0)
            self.save("newsletter-confirmed", start.workflow_id, None,
                      "completed: every uncertain batch found accepted by its own mark, none sent twice")

        # A probation account: more than 10 recipients in one request are refused (420).
        settings = self.settings("newsletter-split", batch_size=60)
        site = await self.published_site("split")
        async with running_worker(self.client, settings):
            self.sim.set_limits(recipient_limit=10)
            start = await start_newsletter(site.email_id, client=self.client, settings=settings)
            await self.client.get_workflow_handle(start.workflow_id).result()
            self.sim.set_limits(recipient_limit=0)
            await self.pool.execute("DELETE FROM sending_domain_limits")
            self.save("newsletter-split", start.workflow_id, start.run_id,
                      "first run: batches refused for their size split into smaller ones and sent")

        # A daily cap below the list: the send waits for the next day on a timer.
        settings = self.settings("newsletter-capped", batch_size=20, daily_send_limit={"*": 40})
        site = await self.published_site("capped")
        async with running_worker(self.client, settings):
            start = await start_newsletter(site.email_id, client=self.client, settings=settings)
            await self.until("SELECT count(*) >= 2 FROM email_batches WHERE email_id = $1 AND status = 'submitted'",
                             site.email_id)
            await asyncio.sleep(2)
            self.save("newsletter-daily-cap", start.workflow_id, None,
                      "running: 40 sent, waiting on a timer for the next day's cap")
            await self.client.get_workflow_handle(start.workflow_id).terminate("captured")

        # The same wait, cancelled by an operator: the wait ends at once and the email is cancelled.
        from operations.newsletter import cancel_newsletter

        settings = self.settings("newsletter-cancelled", batch_size=20, daily_send_limit={"*": 40})
        site = await self.published_site("cancelled")
        await self.pool.execute("DELETE FROM sending_quota_reservations")  # the capped send above used today's
        async with running_worker(self.client, settings):
            start = await start_newsletter(site.email_id, client=self.client, settings=settings)
            handle = self.client.get_workflow_handle(start.workflow_id)
            deadline = time.monotonic() + 60
            while not (await handle.query("progress")).get("message", "").startswith("waiting for the daily limit"):
                if time.monotonic() > deadline:
                    raise SystemExit("waited 60 s for the send to wait for its daily cap")
                await asyncio.sleep(0.1)
            await cancel_newsletter(site.email_id, by="capture", wait=True, client=self.client, settings=settings)
            self.save("newsletter-cancelled", start.workflow_id, None,
                      "completed: 40 sent, cancelled by an operator while waiting for the next day's cap")

        # Mailgun unreachable (nothing listens on its port): after its retries the send waits for
        # the provider on a timer, and waits again while it stays unreachable.
        settings = self.settings("newsletter-outage", batch_size=60, provider_retries=1, provider_retry_seconds=0.5,
                                 provider_outage_first_wait_seconds=1, provider_outage_max_wait_seconds=2,
                                 provider_probe_seconds=1)
        settings = settings.model_copy(update={"mailgun_base_url": f"http://127.0.0.1:{free_port()}"})
        site = await self.published_site("outage")
        async with running_worker(self.client, settings):
            start = await start_newsletter(site.email_id, client=self.client, settings=settings)
            handle = self.client.get_workflow_handle(start.workflow_id)
            deadline = time.monotonic() + 120
            while not (await handle.query("progress")).get("message", "").startswith("Mailgun unreachable since"):
                if time.monotonic() > deadline:
                    raise SystemExit("waited 120 s for the send to wait out Mailgun")
                await asyncio.sleep(0.2)
            await asyncio.sleep(2)
            self.save("newsletter-mailgun-outage", start.workflow_id, None,
                      "running: Mailgun unreachable, looking for its return every second")
            await handle.terminate("captured")

        await self.paused_for_its_rates()

    async def paused_for_its_rates(self) -> None:
        """From 0.9.0: a send whose early answers cross the hard-bounce threshold pauses between
        batches, and an operator resumes it. Its answers are written as the applied events would be."""
        from operations.newsletter import resume_newsletter, start_newsletter

        settings = self.settings("newsletter-paused", batch_size=20, send_concurrency=1, pause_min_answered=10,
                                 pause_hard_bounce_rate=0.05, reputation_check_seconds=1.0)
        site = await self.published_site("paused")
        async with running_worker(self.client, settings):
            self.sim.set_faults(latency_ms=500)
            start = await start_newsletter(site.email_id, client=self.client, settings=settings)
            await self.until("SELECT count(*) >= 1 FROM email_batches WHERE email_id = $1 AND status = 'submitted'",
                             site.email_id)
            await self.pool.execute(
                "INSERT INTO email_recipient_failures (email_id, member_id, email_recipient_id, code, message, "
                "severity, failed_at, event_id) SELECT r.email_id, r.member_id, r.id, 550, 'gone', 'permanent', "
                "now(), 'capture-' || r.id FROM email_recipients r JOIN email_batches b ON b.id = r.batch_id "
                "WHERE r.email_id = $1 AND b.status = 'submitted'", site.email_id)
            await self.until("SELECT paused_at IS NOT NULL FROM emails WHERE id = $1", site.email_id)
            self.sim.set_faults(latency_ms=0)
            self.save("newsletter-paused", start.workflow_id, None,
                      "running: paused between batches for its hard-bounce rate, waiting for an operator")
            await resume_newsletter(site.email_id, by="capture", client=self.client, settings=settings)
            await self.client.get_workflow_handle(start.workflow_id).result()
            self.save("newsletter-resumed", start.workflow_id, None,
                      "completed: resumed by an operator, every remaining member sent once")

    # --- scheduled posts ---

    async def posts(self) -> None:
        from activities.posts.models import publish_workflow_id
        from operations.posts import schedule_post, unschedule_post
        from workflows.posts import ReconcilePostsWorkflow

        settings = self.settings("posts", publish_lead_seconds=1)
        now = datetime.now(UTC).replace(microsecond=0)
        # Before any worker polls: the run's first task holds the start, the unschedule and the
        # schedule that followed it at once.
        revived = await seed_site(self.pool, members=120, run_tag="post-revived")
        await schedule_post(revived.post_id, (now + timedelta(days=2)).isoformat(), client=self.client,
                            settings=settings)
        await unschedule_post(revived.post_id, client=self.client, settings=settings)
        await schedule_post(revived.post_id, (now + timedelta(days=3)).isoformat(), client=self.client,
                            settings=settings)
        async with running_worker(self.client, settings):
            # A query is answered once the run's first task (the three signals) is done.
            await self.client.get_workflow_handle(publish_workflow_id(revived.post_id)).query("publish_at")
            waiting = await seed_site(self.pool, members=120, run_tag="post-waiting")
            await schedule_post(waiting.post_id, (now + timedelta(days=30)).isoformat(), client=self.client,
                                settings=settings)
            moved = await seed_site(self.pool, members=120, run_tag="post-moved")
            for days in (20, 25, 12):
                await schedule_post(moved.post_id, (now + timedelta(days=days)).isoformat(), client=self.client,
                                    settings=settings)
            cancelled = await seed_site(self.pool, members=120, run_tag="post-cancelled")
            await schedule_post(cancelled.post_id, (now + timedelta(days=3)).isoformat(), client=self.client,
                                settings=settings)
            published = await seed_site(self.pool, members=120, run_tag="post-published")
            await schedule_post(published.post_id, (now + timedelta(seconds=4)).isoformat(), client=self.client,
                                settings=settings)
            await asyncio.sleep(1)
            await unschedule_post(cancelled.post_id, client=self.client, settings=settings)
            await self.client.get_workflow_handle(publish_workflow_id(cancelled.post_id)).result()
            await self.client.get_workflow_handle(publish_workflow_id(published.post_id)).result()
            await self.client.get_workflow_handle(f"newsletter-{published.email_id}").result()
            self.save("post-waiting", publish_workflow_id(waiting.post_id), None, "running: timer 30 days ahead")
            self.save("post-rescheduled-after-unschedule", publish_workflow_id(revived.post_id), None,
                      "running: unscheduled and scheduled again before its first task, waiting for the new time")
            self.save("post-moved-twice", publish_workflow_id(moved.post_id), None,
                      "running: scheduled, then moved twice by signal-with-start")
            self.save("post-cancelled", publish_workflow_id(cancelled.post_id), None, "completed: unscheduled")
            self.save("post-published", publish_workflow_id(published.post_id), None,
                      "completed: published on time, newsletter started as a child")
            self.save("post-newsletter-child", f"newsletter-{published.email_id}", None,
                      "completed: the newsletter the publication started")

            handle = await self.client.start_workflow(ReconcilePostsWorkflow.run, id="capture-posts-reconcile",
                                                      task_queue=settings.task_queue)
            await handle.result()
            self.save("posts-reconcile", handle.id, None, "completed: reconcile found every timer in place")
            for site in (waiting, moved, revived):
                await self.client.get_workflow_handle(publish_workflow_id(site.post_id)).terminate("captured")

    # --- outbox ---

    async def outbox(self) -> None:
        from operations.members import add_member
        from operations.outbox import ensure_relay

        # Aborted: every send fails and two attempts are allowed.
        settings = self.settings("outbox-aborted", outbox_max_attempts=2, outbox_backoff_seconds=[1])
        async with running_worker(self.client, settings):
            await ensure_relay(self.client, settings)
            self.sim.set_faults(error_rate=1.0)
            added = await add_member("newcomer-aborted@capture.example", "Aborted", welcome=True, settings=settings)
            await self.until("SELECT status = 'aborted' FROM outbox WHERE idempotency_key = $1", added.welcome_key)
            self.save("outbox-aborted", f"outbox-{added.welcome_key}", None,
                      "completed: two failed attempts, entry aborted")
            relay = self.client.get_workflow_handle(f"outbox-relay-{settings.task_queue}")
            self.save("outbox-relay", relay.id, None, "running: the relay activity claims and starts deliveries")
            await relay.terminate("captured")

        # Mid-retry, then through: the first attempts fail, then Mailgun answers.
        settings = self.settings("outbox-retry", outbox_backoff_seconds=[2])
        async with running_worker(self.client, settings):
            await ensure_relay(self.client, settings)
            self.sim.set_faults(error_rate=1.0)
            added = await add_member("newcomer-retry@capture.example", "Retry", welcome=True, settings=settings)
            await self.until("SELECT status = 'failed' FROM outbox WHERE idempotency_key = $1", added.welcome_key)
            await asyncio.sleep(2)
            self.save("outbox-mid-retry", f"outbox-{added.welcome_key}", None,
                      "running: the handler failed and waits for its next attempt")
            self.sim.set_faults(error_rate=0.0)
            await self.client.get_workflow_handle(f"outbox-{added.welcome_key}").result()
            self.save("outbox-succeeded-after-retry", f"outbox-{added.welcome_key}", None,
                      "completed: sent on a later attempt, entry succeeded")
            await self.client.get_workflow_handle(f"outbox-relay-{settings.task_queue}").terminate("captured")

    # --- analytics ---

    async def analytics(self) -> None:
        from activities.analytics.models import FetchEmailAnalyticsInput
        from workflows.analytics import FetchEmailAnalyticsWorkflow

        settings = self.settings("analytics", analytics_max_opened_events=5)
        async with running_worker(self.client, settings):
            await asyncio.sleep(6)  # the simulator's members open their emails 5 s after delivery
            self.sim.set_faults(latency_ms=1500)
            handle = await self.client.start_workflow(
                FetchEmailAnalyticsWorkflow.run, FetchEmailAnalyticsInput(), id="capture-analytics-midway",
                task_queue=settings.task_queue)
            await asyncio.sleep(1)
            self.save("analytics-mid-fetch", handle.id, None, "running: the first phase's page request in flight")
            self.sim.set_faults(latency_ms=0)
            await handle.result()
            first = (await handle.describe()).run_id
            self.save("analytics-capped", handle.id, handle.first_execution_run_id or first,
                      "first run: opened events hit the cap, continued as new at once")
            self.save("analytics-finished", handle.id, None, "completed: every phase and the aggregates")


    # --- retention ---

    async def retention(self) -> None:
        from activities.retention import RetentionInput
        from workflows.retention import RecipientRetentionWorkflow

        settings = self.settings("retention")
        site = await self.published_site("retention")
        await self.pool.execute("UPDATE emails SET status = 'submitted', submitted_at = now() - interval '400 days' "
                                "WHERE id = $1", site.email_id)
        async with running_worker(self.client, settings):
            handle = await self.client.start_workflow(RecipientRetentionWorkflow.run, RetentionInput(),
                                                      id="capture-retention", task_queue=settings.task_queue)
            await handle.result()
        self.save("retention-finished", handle.id, None, "completed: an old email folded")

    # --- automations ---

    async def automations(self) -> None:
        from operations.automations import create_sequence, enter_member, set_automation_status

        email = {"type": "send_email", "subject": "Hello", "html": "<p>Hello %recipient.name%</p>"}
        tiny = {"type": "wait", "wait_hours": 0.0005}  # 1.8 s
        settings = self.settings("automations")
        members = [await self.pool.fetchval("INSERT INTO members (email, name) VALUES ($1, 'Automation Reader') "
                                            "RETURNING id", f"automation{n}@capture.example") for n in range(3)]
        async with running_worker(self.client, settings), self.pool.acquire() as conn:
            completed = await create_sequence(conn, "capture-completed", "Completed", ["free"], [email, tiny, email])
            waiting = await create_sequence(conn, "capture-waiting", "Waiting", ["free"],
                                            [email, {"type": "wait", "wait_hours": 72}, email])
            disabled = await create_sequence(conn, "capture-disabled", "Disabled", ["free"],
                                             [email, {"type": "wait", "wait_hours": 0.002}, email])
            done = await enter_member(conn, completed, members[0], client=self.client, settings=settings)
            held = await enter_member(conn, waiting, members[1], client=self.client, settings=settings)
            stopped = await enter_member(conn, disabled, members[2], client=self.client, settings=settings)
            await self.client.get_workflow_handle(done).result()
            self.save("automation-completed", done, None, "completed: send, a short wait, send")
            await self.until(AT_ITS_WAIT, held)
            await asyncio.sleep(1)
            self.save("automation-waiting", held, None, "running: the first email sent, a three-day timer")
            await self.until(AT_ITS_WAIT, stopped)
            await set_automation_status(disabled, "inactive", settings=settings)
            await self.client.get_workflow_handle(stopped).result()
            self.save("automation-exited-early", stopped, None,
                      "completed: the automation switched off during its wait, the run exited early")
            await self.client.get_workflow_handle(held).terminate("captured")

    # --- webhooks ---

    async def webhooks(self) -> None:
        from activities.webhooks import INBOX_WORKFLOW_ID
        from operations.webhooks import ensure_inbox_applier
        from pressroom.store.events import INBOX_CHANNEL

        settings = self.settings("webhooks")
        async with running_worker(self.client, settings):
            await ensure_inbox_applier(self.client, settings)
            event = {"id": "capture-pushed-1", "event": "delivered", "timestamp": time.time(),
                     "recipient": "member0@capture.example", "user-variables": {"email-id": "capture-unknown"}}
            await self.pool.execute("INSERT INTO webhook_inbox (provider, kind, event) "
                                    "VALUES ('mailgun', 'delivered', $1)",
                                    json.dumps(event))
            await self.pool.execute("SELECT pg_notify($1, '')", INBOX_CHANNEL)
            await self.until("SELECT count(*) = 0 FROM webhook_inbox")
            inbox = self.client.get_workflow_handle(f"{INBOX_WORKFLOW_ID}-{settings.task_queue}")
            self.save("webhook-inbox", inbox.id, None, "running: the inbox activity applies pushed events")
            await inbox.terminate("captured")


async def main() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", help="capture these jobs only, keeping the folder's other histories")
    parser.add_argument("--version", help="the folder to write (default: pyproject's version)")
    args = parser.parse_args()
    version = args.version or tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    out = ROOT / "tests" / "histories" / version
    if out.exists() and not args.only:
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="pressroom-capture-"))
    postgres = Postgres(folder / "postgres", free_port())
    postgres.start(durable=False)
    async with AsyncExitStack() as stack:
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
        stack.callback(postgres.stop)
        port = free_port()
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=find_binary("temporal"), data_converter=data_converter(), port=port,
            search_attributes=SEARCH_ATTRIBUTES,
            dev_server_extra_args=["--log-level", "error", "--dynamic-config-value",
                                   "limit.historyCount.suggestContinueAsNew=200"])
        stack.push_async_callback(env.shutdown)
        simulator = MailgunSimulator(api_key=SIMULATOR_KEY, domain=SIMULATOR_DOMAIN)
        await simulator.start()
        stack.push_async_callback(simulator.stop)
        await database.migrate(postgres.url)
        pool = await database.connect(postgres.url, max_size=5)
        stack.push_async_callback(pool.close)
        capture = Capture(env.client, f"127.0.0.1:{port}", pool, simulator, postgres.url, out)
        print(f"capturing release {version} into {out.relative_to(ROOT)}")
        jobs = (capture.newsletters, capture.newsletter_limits, capture.posts, capture.outbox, capture.analytics,
                capture.webhooks, capture.retention, capture.automations)
        if args.only:
            manifest = out / "manifest.json"
            capture.manifest = json.loads(manifest.read_text()) if manifest.exists() else {}
        for job in jobs:
            if not args.only or job.__name__ in args.only:
                await job()
        (out / "manifest.json").write_text(json.dumps(capture.manifest, indent=2, sort_keys=True) + "\n")
    print(f"{len(capture.manifest)} histories")


if __name__ == "__main__":
    asyncio.run(main())

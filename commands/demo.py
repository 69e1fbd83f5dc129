"""`pressroom demo`: the whole product in about a minute, on the local development stack.

A site is seeded, a worker runs in this process, a new member gets their welcome email through
the outbox, a post is scheduled a few seconds ahead and published on time, its newsletter goes to
every member with a progress bar, an analytics run fetches the simulator's events, and the email's
report (`newsletter report`) shows what happened. Every step is a real workflow you can open in the Web UI.
The front door (`pressroom serve`) runs in this process too, so the email's links go through its
redirects: the simulator's readers follow some of them and its mail scanners prefetch others, and
the report shows the clicks and what it set apart.

With `PRESSROOM_EMAIL_PROVIDER=ses` the stack runs the SES stand-in instead of the Mailgun
simulator; SES has no events to fetch, so the demo also runs the webhook receiver
(POST /webhooks/ses) in this process, subscribes it to the stand-in's SNS topic, and the report
shows the events the stand-in pushed to it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import httpx
import typer
from aiohttp import web
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from temporalio.service import RPCError

from activities.analytics.models import FetchEmailAnalyticsInput
from activities.outbox import outbox_workflow_id
from activities.posts.models import publish_workflow_id
from commands import console, run_async
from commands.newsletter import print_report
from devstack import stack
from devstack.servers import free_port
from frontdoor.receiver import Receiver
from frontdoor.server import FrontDoor
from operations.demo_site import seed_site, wait_for_publication, wait_for_welcome_email
from operations.members import add_member
from operations.newsletter import follow_newsletter
from operations.outbox import ensure_relay
from operations.posts import schedule_post
from operations.reports import newsletter_report
from operations.webhooks import ensure_inbox_applier, webhooks_setup
from pressroom import database, logs
from pressroom.providers.ses.settings import ses_settings
from pressroom.settings import load_settings
from pressroom.temporal import connect
from worker import running_worker
from workflows.analytics import FetchEmailAnalyticsWorkflow
from workflows.newsletter_models import newsletter_workflow_id

app = typer.Typer()


@app.command()
def demo(members: int = typer.Option(5000, "--members", min=1, max=1_000_000, help="How many members to seed."),
         publish_in: float = typer.Option(15, "--publish-in", min=0, help="Seconds until the post publishes."),
         keep_running: bool = typer.Option(False, "--keep-running", help="Keep the worker running afterwards.")
         ) -> None:
    """Everything in one minute: dev stack, a site, a welcome email, a scheduled post, its newsletter,
    analytics, and a closing table. Run it again any time; it reuses the data in ./.pressroom."""
    run_async(run_demo(console, members=members, publish_in=publish_in, keep_running=keep_running))


async def run_demo(console: Console, *, members: int, publish_in: float, keep_running: bool) -> None:
    # The worker runs in this process: its retried failures are part of the show, not errors to print;
    # a real error is one line (a traceback only with PRESSROOM_DEBUG=1).
    logs.configure(level=logging.ERROR)
    status = await asyncio.to_thread(stack.up)
    console.print(f"[bold]Development stack[/bold]: started {', '.join(status.started) or 'nothing new'}"
                  + (f"; already running: {', '.join(status.running)}" if status.running else ""))
    # The simulator stores events the moment they happen, so the demo reads them without the
    # one-minute end margin that real Mailgun needs.
    door_port = free_port()
    settings = load_settings(analytics_end_margin_seconds=0, publish_lead_seconds=2, email_track_clicks=True,
                             site_url=f"http://127.0.0.1:{door_port}")
    await database.migrate(settings.require_database())
    client = await connect(settings)
    pool = await database.connect(settings.require_database(), max_size=10)
    tag = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    try:
        site = await seed_site(pool, members=members, run_tag=tag)
        console.print(f"[bold]Site[/bold]: newsletter with {site.members:,} members; post {site.post_id} "
                      f"with email {site.email_id}")
        async with running_worker(client, settings), _receiving_pushes(pool, settings) as receiver_url, \
                _front_door(pool, settings, door_port):
            await ensure_relay(client, settings)
            await _readers_follow_links(settings)
            console.print(f"[bold]Front door[/bold]: {settings.site_url} (the email's tracked links)", highlight=False)
            if receiver_url:
                await ensure_inbox_applier(client, settings)  # the pushed events are applied from the inbox
                console.print(f"[bold]Events[/bold]: SES's SNS topic pushes to {receiver_url}", highlight=False)
            console.print("[bold]Worker[/bold]: running in this process on task queue "
                          f"{settings.task_queue}")

            # A real-looking domain: address validation refuses the reserved .test names people type by mistake.
            added = await add_member(f"newcomer-{tag}@example.com", "Newcomer", welcome=True, settings=settings)
            await wait_for_welcome_email(pool, added.welcome_key)
            console.print(f"[bold]Outbox[/bold]: member {added.member_id} joined; welcome email sent "
                          f"(workflow {outbox_workflow_id(added.welcome_key)})")

            publish_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=publish_in)
            await schedule_post(site.post_id, publish_at.isoformat(), client=client, settings=settings)
            console.print(f"[bold]Post[/bold]: scheduled for {publish_at:%H:%M:%S} UTC "
                          f"(workflow {publish_workflow_id(site.post_id)}); waiting…")
            late = await wait_for_publication(pool, site.post_id, seconds=publish_in + 60)
            console.print(f"[bold]Post[/bold]: published {late:.0f} ms after its time")

            newsletter_id = newsletter_workflow_id(site.email_id)
            await _wait_for_workflow(client, newsletter_id)
            with Progress(TextColumn("[bold]Newsletter"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("batches · {task.fields[recipients]} recipients"), TimeElapsedColumn(),
                          console=console) as bar:
                task = bar.add_task("send", total=None, recipients="0")

                def show(progress) -> None:
                    bar.update(task, total=progress.batches_total or None,
                               completed=progress.batches_sent + progress.batches_failed,
                               recipients=f"{progress.recipients_sent:,}/{progress.recipients_total:,}")

                outcome = await follow_newsletter(newsletter_id, client=client, on_progress=show)
                if outcome.counts:
                    c = outcome.counts
                    bar.update(task, total=c.batches_total, completed=c.batches_submitted + c.batches_failed,
                               recipients=f"{c.recipients_submitted:,}/{c.recipients_total:,}")
            console.print(f"[bold]Newsletter[/bold]: {outcome.status} (workflow {newsletter_id})")

            console.print("[bold]Analytics[/bold]: waiting for the recipients to open it…")
            if receiver_url:  # pushed: the stand-in's readers open at once; wait until the inbox is applied
                await _wait_for_opens(site.email_id, settings)
            else:
                await asyncio.sleep(7)  # the simulator's members open 5 s after delivery
            analytics_id = f"email-analytics-demo-{tag}"
            await client.execute_workflow(FetchEmailAnalyticsWorkflow.run, FetchEmailAnalyticsInput(),
                                                id=analytics_id, task_queue=settings.task_queue)
            console.print(f"[bold]Analytics[/bold]: fetched events (workflow {analytics_id})")
            await _wait_for_clicks(site.email_id, settings)
            console.print(f"\n[bold]Report[/bold] (pressroom newsletter report {site.email_id})")
            print_report(await newsletter_report(site.email_id, settings=settings))
            console.print(f"\nWho did not get it and why: [bold]pressroom members list --left-out-of {site.email_id}"
                          f"[/bold]; one member's emails: [bold]pressroom members show {added.member_id}[/bold]; "
                          "every email: [bold]pressroom newsletter list[/bold]; the designed email as a reader "
                          f"gets it: [bold]pressroom newsletter preview {site.email_id}[/bold].", highlight=False)
            ui = status.values.get("temporal_ui", "your Temporal Web UI")
            console.print(f"\nOpen [bold]{ui}[/bold] and search for [bold]EmailId=\"{site.email_id}\"[/bold], or "
                          f"open the workflows {publish_workflow_id(site.post_id)}, {newsletter_id}, "
                          f"{outbox_workflow_id(added.welcome_key)} and {analytics_id}.", highlight=False)
            stand_in = "the SES stand-in" if receiver_url else "the Mailgun simulator"
            console.print(f"\nThe development stack (PostgreSQL, Temporal and its Web UI, {stand_in}) keeps "
                          "running in the background, with its data in ./.pressroom; [bold]pressroom dev down[/bold] "
                          "stops it.", highlight=False)
            if keep_running:
                console.print("The worker keeps running; press Ctrl-C to stop.")
                await asyncio.Event().wait()
    finally:
        await pool.close()


@asynccontextmanager
async def _receiving_pushes(pool, settings) -> AsyncIterator[str]:
    """With a provider that only pushes its events (SES), the webhook receiver on a free local port,
    subscribed to the provider's topic; its URL. With Mailgun, nothing (the demo fetches events)."""
    if settings.email_provider != "ses":
        yield ""
        return
    receiver = Receiver(pool, settings)
    runner = web.AppRunner(receiver.app(), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}{receiver.push.path}"
    try:
        # The stand-in confirms by SNS's handshake and keeps every notification until it is taken.
        await webhooks_setup(url, settings)
        yield url
    finally:
        await runner.cleanup()


@asynccontextmanager
async def _front_door(pool, settings, port: int) -> AsyncIterator[None]:
    """`pressroom serve` in this process: the email's tracked links and unsubscribe links answer here."""
    door = FrontDoor(pool, settings)
    await door.start("127.0.0.1", port)
    try:
        yield
    finally:
        await door.stop()


async def _readers_follow_links(settings) -> None:
    """The simulator's readers follow a link of some copies, and its scanners prefetch every link of a few."""
    base = ses_settings().ses_endpoint if settings.email_provider == "ses" else settings.mailgun_base_url
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.post(f"{base}/_sim/follow", json={"readers": 0.3, "scanners": 0.05,
                                                              "reader_delay_seconds": 4.0})
        answer.raise_for_status()


async def _wait_for_opens(email_id: str, settings, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while (report := await newsletter_report(email_id, settings=settings)).opened < report.sent:
        if time.monotonic() > deadline:
            return  # the report shows what arrived
        await asyncio.sleep(0.5)


async def _wait_for_clicks(email_id: str, settings, seconds: float = 60) -> None:
    """The readers follow their links seconds after delivery, and a click counts once no scanner's
    burst can claim it: wait for the first to count, so the report shows them."""
    deadline = time.monotonic() + seconds
    while not (await newsletter_report(email_id, settings=settings)).clicks.clicked:
        if time.monotonic() > deadline:
            return  # the report shows what arrived
        await asyncio.sleep(0.5)


async def _wait_for_workflow(client, workflow_id: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            await client.get_workflow_handle(workflow_id).describe()
            return
        except RPCError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)

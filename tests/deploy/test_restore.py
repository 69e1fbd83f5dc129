"""Backup and restore, drilled (docs/production.md "Backup and restore"): a site with scheduled posts, a
send in flight and outbox entries under way is backed up with `pg_dump`; PostgreSQL and Temporal are
both lost; the dump is restored into a fresh database beside an empty Temporal, and a worker brings
everything back: each post publishes at its time, the send finishes with every member once (the batch
that was in flight is looked up in the provider's events, never blindly sent again), and each new
member gets one welcome email."""

from __future__ import annotations

import signal
import subprocess
import uuid
from pathlib import Path

import asyncpg
import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from devstack.servers import find_binary, postgres_bin
from operations.members import add_member
from operations.newsletter import start_newsletter
from operations.posts import schedule_post
from pressroom import database
from pressroom.temporal import SEARCH_ATTRIBUTES, data_converter
from tests.conftest import make_settings
from tests.newsletter.conftest import seed_email
from tests.newsletter.test_failures import spawn_worker, wait_until, worker_log
from tests.newsletter.test_send import delivered
from tests.outbox.test_outbox import WELCOME
from tests.posts.test_publish import seed_post, soon
from workflows.newsletter_models import newsletter_workflow_id

MEMBERS = 16
BATCH = 4  # four batches, one at a time: the backup finds one sent, one in flight, two to send
POST_DELAYS = (45, 55)  # seconds from the start: due after the restore
WORKER_ENV = {"PRESSROOM_SEND_CONCURRENCY": "1", "PRESSROOM_ORPHAN_CHECK_SECONDS": "1",
              "PRESSROOM_PUBLISH_LEAD_SECONDS": "2", "PRESSROOM_OUTBOX_BACKOFF_SECONDS": "1",
              "PRESSROOM_OUTBOX_POLL_INTERVAL_SECONDS": "0.2", "PRESSROOM_ADDRESS_HASH_KEY": "test-address-hash-key"}


async def start_temporal() -> WorkflowEnvironment:
    """A Temporal dev server of the test's own, in memory: shutting it down loses everything it held."""
    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=find_binary("temporal"), data_converter=data_converter(),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=["--log-level", "error",
                               "--dynamic-config-value", 'matching.longPollExpirationInterval="5s"'])


async def new_database(server_url: str, name: str) -> str:
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return server_url.rsplit("/", 1)[0] + f"/{name}"


async def drop_database(server_url: str, name: str) -> None:
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    finally:
        await admin.close()


def run_tool(*command: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{command[0]}: {result.stderr}"


async def site_under_way(pool, settings, temporal) -> tuple[str, list[str], list[str], str]:
    """The send started and two posts scheduled; once one batch is sent and the next in flight, two
    members join (their welcomes go to the relay). The email, the posts, the new members' addresses."""
    seeded = await seed_email(pool, members=MEMBERS)
    await pool.execute(WELCOME)
    posts = [await seed_post(pool) for _ in POST_DELAYS]
    for post_id, delay in zip(posts, POST_DELAYS, strict=True):
        await schedule_post(post_id, soon(delay), client=temporal.client, settings=settings)
    await start_newsletter(seeded.email_id, client=temporal.client, settings=settings)

    async def one_sent_one_in_flight() -> bool:
        states = await pool.fetch("SELECT status FROM email_batches WHERE email_id = $1", seeded.email_id)
        return {"submitted", "submitting"} <= {row["status"] for row in states}
    await wait_until(one_sent_one_in_flight, 90)
    joined = [f"joined-{n}-{uuid.uuid4().hex[:6]}@example.com" for n in range(2)]
    for address in joined:
        await add_member(address, welcome=True, settings=settings)

    async def welcome_under_way() -> bool:
        return bool(await pool.fetchval("SELECT count(*) FROM outbox WHERE status = 'sending'"))
    await wait_until(welcome_under_way, 60)
    return seeded.email_id, posts, joined, seeded.newsletter_id


@pytest.mark.crash
async def test_a_site_restored_from_pg_dump_beside_an_empty_temporal_finishes_what_was_under_way(
        postgres_server, mailgun, tmp_path: Path):
    tag = uuid.uuid4().hex[:8]
    source_url = await new_database(postgres_server.url, f"before_{tag}")
    await database.migrate(source_url)
    settings = make_settings(source_url, mailgun, batch_size=BATCH, send_concurrency=1, orphan_check_seconds=1)
    mailgun.set_faults(latency_ms=3000)  # each request to the provider takes 3 s: a batch stays in flight
    dump = tmp_path / "pressroom.dump"

    # --- the site at work: a worker, its Temporal, its database ---
    old_temporal = await start_temporal()
    pool = await database.connect(source_url, max_size=4)
    worker = spawn_worker(settings, old_temporal, **WORKER_ENV)
    try:
        email_id, posts, joined, newsletter_id = await site_under_way(pool, settings, old_temporal)
        run_tool(str(postgres_bin() / "pg_dump"), "--format=custom", f"--file={dump}", f"--dbname={source_url}")
    finally:
        # --- the disaster: the worker, Temporal and PostgreSQL's database are gone ---
        worker.send_signal(signal.SIGKILL)
        worker.wait(30)
        await pool.close()
        await old_temporal.shutdown()
    await drop_database(postgres_server.url, f"before_{tag}")

    # --- the restore: a fresh database from the dump, migrations as a deploy runs them, an empty Temporal ---
    restored_url = await new_database(postgres_server.url, f"restored_{tag}")
    run_tool(str(postgres_bin() / "pg_restore"), "--no-owner", "--exit-on-error", f"--dbname={restored_url}",
             str(dump))
    assert await database.migrate(restored_url) == []  # the dump holds the schema and its versions
    pool = await database.connect(restored_url, max_size=4)
    restored = settings.model_copy(update={"database_url": restored_url})
    mailgun.set_faults(latency_ms=0)
    temporal = await start_temporal()
    worker = None
    try:
        # What the backup caught under way: it is this test's premise, so it is checked, not assumed.
        in_flight = await pool.fetch("SELECT id FROM email_batches WHERE email_id = $1 AND status = 'submitting'",
                                     email_id)
        assert in_flight, "the backup caught a batch in flight"
        assert await pool.fetchval("SELECT status FROM emails WHERE id = $1", email_id) == "submitting"
        assert await pool.fetchval("SELECT count(*) FROM outbox WHERE status = 'sending'") >= 1
        assert await pool.fetchval("SELECT count(*) FROM posts WHERE status = 'scheduled' AND published_at > now()"
                                   ) == len(posts), "the posts were due after the restore"

        worker = spawn_worker(restored, temporal, **WORKER_ENV)

        async def all_back() -> bool:
            return await pool.fetchval(
                "SELECT (SELECT status FROM emails WHERE id = $1) = 'submitted' "
                "AND NOT EXISTS (SELECT 1 FROM outbox WHERE status <> 'succeeded') "
                "AND NOT EXISTS (SELECT 1 FROM posts WHERE id = ANY($2::text[]) AND status <> 'published')",
                email_id, posts)
        await wait_until(all_back, 180, worker)

        # Every member of the newsletter once: the batch in flight at the backup was found, not sent again.
        members = {row["email"] for row in await pool.fetch(
            "SELECT m.email FROM members m JOIN members_newsletters mn ON mn.member_id = m.id "
            "WHERE mn.newsletter_id = $1 AND m.email NOT LIKE 'joined-%'", newsletter_id)}
        assert len(members) == MEMBERS
        assert delivered(mailgun, email_id) == dict.fromkeys(members, 1), worker_log(worker)
        assert len(mailgun.messages_for(email_id)) == MEMBERS // BATCH
        # Each new member welcomed once.
        for address in joined:
            welcomes = [m for m in mailgun.messages if address in m.recipients and m.subject == "Welcome!"]
            assert len(welcomes) == 1, address
        # Each post published at its time, by a timer of the new Temporal.
        for row in await pool.fetch("SELECT id, published_at, publish_completed_at FROM posts WHERE id = ANY($1)",
                                    posts):
            assert row["publish_completed_at"] >= row["published_at"], row["id"]
        run = await temporal.client.get_workflow_handle(newsletter_workflow_id(email_id)).describe()
        assert run.status == WorkflowExecutionStatus.COMPLETED
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            worker.wait(60)
        await pool.close()
        await temporal.shutdown()
        await drop_database(postgres_server.url, f"restored_{tag}")

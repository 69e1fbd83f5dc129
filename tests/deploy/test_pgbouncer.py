"""Behind Debian's real PgBouncer in transaction mode: `migrate` from two processes at once, members
added and the outbox delivering their welcome, a small newsletter send, the Admin API answering
(docs/production.md)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest

from devstack.servers import free_port, stop_process, wait_for_port
from operations.integrations import add_integration
from operations.outbox import ensure_relay
from pressroom import database
from tests.admin_api.conftest import API, token
from tests.conftest import make_settings
from tests.foundation.test_cli import pressroom_each
from tests.frontdoor.conftest import close_door, open_door
from tests.newsletter.conftest import seed_email
from tests.newsletter.test_send import delivered, run_send
from tests.outbox.test_outbox import WELCOME, settled
from worker import running_worker
from workflows.outbox import RELAY_WORKFLOW_ID

PGBOUNCER = shutil.which("pgbouncer") or next(
    (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None)
if PGBOUNCER is None and not os.environ.get("PRESSROOM_REQUIRE_PGBOUNCER"):
    pytest.skip("pgbouncer is not installed (apt-get install pgbouncer; CI requires it)", allow_module_level=True)


@pytest.fixture(scope="module")
def pgbouncer(postgres_server) -> Iterator[int]:
    """PgBouncer in transaction mode in front of the test PostgreSQL; its port."""
    assert PGBOUNCER, "PRESSROOM_REQUIRE_PGBOUNCER is set but pgbouncer is not installed"
    folder = Path(tempfile.mkdtemp(prefix="pressroom-pgbouncer-"))
    port = free_port()
    target = urlsplit(postgres_server.url)
    (folder / "userlist.txt").write_text(f'"{target.username}" "{target.password}"\n')
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\n* = host=127.0.0.1 port={target.port}\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = scram-sha-256\nauth_file = {folder}/userlist.txt\npool_mode = transaction\n"
        f"max_client_conn = 500\ndefault_pool_size = 40\n"
        f"logfile = {folder}/pgbouncer.log\npidfile = {folder}/pgbouncer.pid\n")
    command = [PGBOUNCER, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        shutil.chown(folder, "nobody")
        for file in folder.iterdir():
            shutil.chown(file, "nobody")
        command[1:1] = ["-u", "nobody"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, "pgbouncer", process, folder / "pgbouncer.log")
        yield port
    finally:
        stop_process(process.pid)
        shutil.rmtree(folder, ignore_errors=True)


def through(port: int, url: str) -> str:
    """`url` with PgBouncer's port in place of PostgreSQL's."""
    parts = urlsplit(url)
    return parts._replace(netloc=f"{parts.username}:{parts.password}@127.0.0.1:{port}").geturl()


@pytest.fixture
def transaction_pooler(monkeypatch) -> None:
    monkeypatch.setenv(database.POOLER_VARIABLE, "transaction")


async def test_migrate_from_two_processes_at_once_through_a_transaction_pooler(postgres_server, pgbouncer):
    admin = await asyncpg.connect(postgres_server.url)
    await admin.execute("CREATE DATABASE pressroom_pooled_migrate")
    await admin.close()
    pooled = through(pgbouncer, postgres_server.url.rsplit("/", 1)[0] + "/pressroom_pooled_migrate")

    results = await asyncio.to_thread(pressroom_each, ("migrate",), ("migrate",),
                                      env={"DATABASE_URL": pooled, database.POOLER_VARIABLE: "transaction"})
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    conn = await asyncpg.connect(postgres_server.url.rsplit("/", 1)[0] + "/pressroom_pooled_migrate")
    try:
        applied = [r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations ORDER BY version")]
    finally:
        await conn.close()
    assert applied == [version for version, _ in database.migrations()]


async def test_a_worker_and_commands_through_a_transaction_pooler_add_deliver_and_send(
        db, mailgun, dev_env, postgres_url, pgbouncer, transaction_pooler):
    """The worker's pool and the commands' own processes share PgBouncer's server connections: each
    process names its prepared statements from 1, so with asyncpg's cache on the second clashes
    (DuplicatePreparedStatementError)."""
    pooled = through(pgbouncer, postgres_url)
    # LISTEN goes to PostgreSQL itself (DATABASE_DIRECT_URL); everything else through the pooler.
    settings = make_settings(pooled, mailgun, database_direct_url=postgres_url,
                             outbox_backoff_seconds=[1], outbox_poll_interval_seconds=0.2, batch_size=5)
    await db.execute(WELCOME)
    seeded = await seed_email(db, members=12)
    env = {"DATABASE_URL": pooled, database.POOLER_VARIABLE: "transaction"}
    async with running_worker(dev_env.client, settings):
        await ensure_relay(dev_env.client, settings)
        try:
            added = await asyncio.to_thread(pressroom_each, *(("members", "add", f"pooled.{n}@example.com", "--welcome")
                                                              for n in range(3)), env=env)
            assert [r.returncode for r in added] == [0, 0, 0], [r.stderr for r in added]
            for key in await db.fetchval("SELECT array_agg(idempotency_key) FROM outbox"):
                await settled(db, key)
            outcome = await run_send(dev_env.client, settings, seeded.email_id)
        finally:
            await dev_env.client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{settings.task_queue}").terminate()

    for n in range(3):
        assert [m.subject for m in mailgun.messages if f"pooled.{n}@example.com" in m.recipients] == ["Welcome!"]
    assert outcome.status == "submitted" and outcome.counts.batches_total == 3
    counts = delivered(mailgun, seeded.email_id)
    assert len(counts) == 12 and set(counts.values()) == {1}


async def test_the_admin_api_answers_through_a_transaction_pooler(db, mailgun, postgres_url, pgbouncer,
                                                                   transaction_pooler):
    pooled = through(pgbouncer, postgres_url)
    settings = make_settings(pooled, mailgun, webhook_signing_key=mailgun.webhook_signing_key)
    key = (await add_integration("Pooled", settings=settings)).admin_api_key
    door = await open_door(settings)
    try:
        async def sign(request: httpx.Request) -> None:
            request.headers["Authorization"] = f"Ghost {token(key)}"

        async with httpx.AsyncClient(base_url=door.base + API, event_hooks={"request": [sign]}, timeout=30) as api:
            # Members added from processes of their own meanwhile share the pooler's server connections.
            added = await asyncio.to_thread(pressroom_each, *(("members", "add", f"api.{n}@example.com")
                                                              for n in range(2)),
                                            env={"DATABASE_URL": pooled, database.POOLER_VARIABLE: "transaction"})
            assert [r.returncode for r in added] == [0, 0], [r.stderr for r in added]
            pages = [await api.get("members/", params={"limit": 10, "order": "email asc"}) for _ in range(3)]
    finally:
        await close_door(door)
    for page in pages:
        assert page.status_code == 200, page.text
        assert [m["email"] for m in page.json()["members"]] == ["api.0@example.com", "api.1@example.com"]

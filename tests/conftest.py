"""The test harness: real PostgreSQL, real Temporal servers and the Mailgun simulator over real HTTP.

Everything comes from the PyPI wheels the project installs; nothing is downloaded. The servers
start once per session on free ports; each test gets a clean database and its own task queue.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg
import pytest
from temporalio.testing import WorkflowEnvironment

# Whatever the session writes to the temporary folder (its own files, its servers', those of the
# commands and workers it runs) goes into one folder, removed when the session ends: a run leaves
# nothing behind. Others may pass through it (not list it): run as root, PostgreSQL's service user
# reaches its throwaway data there.
SESSION_TMP = tempfile.mkdtemp(prefix="pressroom-tests-")
os.chmod(SESSION_TMP, 0o711)
os.environ["TMPDIR"] = tempfile.tempdir = SESSION_TMP
atexit.register(shutil.rmtree, SESSION_TMP, ignore_errors=True)
# Bytecode is cached for the session, in that folder, even where PYTHONDONTWRITEBYTECODE is set: every
# worker, command and script the suite starts (and every workflow sandbox) compiles the project once,
# not once per process.
# The test site's sender, as the development stack's (outside it there is no default); the tests of
# a send without one unset it.
os.environ.setdefault("PRESSROOM_FROM_ADDRESS", "Pressroom <noreply@example.com>")
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix = os.path.join(SESSION_TMP, "bytecode")
# Tests never read a developer's running stack or environment: each value comes from a fixture.
os.environ["PRESSROOM_HOME"] = tempfile.mkdtemp(prefix="pressroom-test-home-")
for variable in ("DATABASE_URL", "TEMPORAL_ADDRESS", "MAILGUN_API_KEY", "MAILGUN_DOMAIN", "MAILGUN_BASE_URL",
                 "PRESSROOM_ENCRYPTION_KEY", "MAILGUN_WEBHOOK_SIGNING_KEY"):
    os.environ.pop(variable, None)

from devstack.servers import Postgres, find_binary, free_port
from operations.outbox import ensure_relay
from pressroom import database
from pressroom.settings import Settings, load_settings
from pressroom.temporal import SEARCH_ATTRIBUTES, data_converter, register_search_attributes
from worker import running_worker
from workflows.outbox import RELAY_WORKFLOW_ID

if TYPE_CHECKING:
    from devstack.mailgun_simulator import MailgunSimulator

SIMULATOR_KEY = "key-simulator-" + "0" * 8  # a fake key, only ever valid for the local simulator
SIMULATOR_DOMAIN = "mg.test.example"


@pytest.fixture(scope="session")
def postgres_server() -> Postgres:
    """One PostgreSQL for the session (or TEST_POSTGRES_URL's server, when set)."""
    folder = Path(tempfile.mkdtemp(prefix="pressroom-pg-"))
    server = Postgres(folder, free_port())
    server.start(durable=False)
    yield server
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
async def postgres_url(postgres_server: Postgres) -> str:
    """A fresh, migrated database for this test session."""
    import asyncio

    for _ in range(300):  # the port opens a moment before the server accepts sessions, longer under load
        try:
            admin = await asyncpg.connect(postgres_server.url)
            break
        except asyncpg.CannotConnectNowError:
            await asyncio.sleep(0.1)
    await admin.execute("CREATE DATABASE pressroom_test")
    await admin.close()
    url = postgres_server.url.rsplit("/", 1)[0] + "/pressroom_test"
    await database.migrate(url)
    return url


@pytest.fixture(scope="session")
async def db_pool(postgres_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await database.connect(postgres_url, max_size=10)
    yield pool
    await pool.close()


# Only the tables that hold rows are truncated, in one round trip: most tests touch a few of them,
# and a TRUNCATE of every table (new files for each) was a good part of every test's setup.
EMPTY_ALL_TABLES = """DO $$
DECLARE name text; filled boolean; dirty text[] := '{}';
BEGIN
  FOR name IN SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'schema_migrations' LOOP
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I)', name) INTO filled;
    IF filled THEN dirty := dirty || format('%I', name); END IF;
  END LOOP;
  IF cardinality(dirty) > 0 THEN EXECUTE 'TRUNCATE ' || array_to_string(dirty, ', ') || ' CASCADE'; END IF;
END $$"""


async def empty_all_tables(pool: asyncpg.Pool) -> None:
    await pool.execute(EMPTY_ALL_TABLES)


@pytest.fixture
async def db(db_pool: asyncpg.Pool) -> asyncpg.Pool:
    """The session's database, emptied before the test."""
    await empty_all_tables(db_pool)
    return db_pool


@pytest.fixture(scope="session")
async def simulator() -> AsyncIterator[MailgunSimulator]:
    from devstack.mailgun_simulator import MailgunSimulator

    sim = MailgunSimulator(api_key=SIMULATOR_KEY, domain=SIMULATOR_DOMAIN)
    await sim.start()
    yield sim
    await sim.stop()


@pytest.fixture
async def mailgun(simulator: MailgunSimulator) -> MailgunSimulator:
    """The session's simulator with no messages, no events and no faults."""
    simulator.reset()
    return simulator


@pytest.fixture(scope="session")
async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """Temporal's time-skipping test server: workflow logic and long timers in no time."""
    env = await start_time_skipping_server()
    yield env
    await env.shutdown()


async def start_time_skipping_server() -> WorkflowEnvironment:
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=find_binary("temporal-test-server"), data_converter=data_converter())
    await register_search_attributes(env.client)
    return env


def time_skipping_server_of_its_own():
    """A `time_skipping_env` fixture for one folder's conftest: a server whose clock no other folder
    has skipped ahead (tests there skip years: long timers, daily caps; a folder that schedules
    by that clock wants times the CLI accepts)."""
    @pytest.fixture(scope="session")
    async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
        env = await start_time_skipping_server()
        yield env
        await env.shutdown()
    return time_skipping_env


@pytest.fixture(scope="session")
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    """Temporal's dev server: real persistence and real timing, with our search attributes."""
    ui_port = free_port()
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=find_binary("temporal"), data_converter=data_converter(),
        search_attributes=SEARCH_ATTRIBUTES, ui=True, ui_port=ui_port,
        dev_server_extra_args=["--log-level", "error",
                               # Suggest continue-as-new early so that path runs in every test.
                               "--dynamic-config-value", "limit.historyCount.suggestContinueAsNew=200",
                               # A live worker polls every 5 s, not every minute, so that a test can
                               # see a stopped one gone (PRESSROOM_WORKER_SEEN_WITHIN_SECONDS) in seconds.
                               "--dynamic-config-value", 'matching.longPollExpirationInterval="5s"'])
    env.ui_url = f"http://localhost:{ui_port}"  # the Web UI, for the headless-browser test
    yield env
    await env.shutdown()


@pytest.fixture
async def schedules_removed_after(dev_env):
    """A `pressroom worker` creates the namespace's schedules at start, on its own task queue, and
    leaves one another worker made on another queue where it is: the test starts with none (an
    earlier test's, on a queue nobody polls any more, would fail `check`), and later tests expect none."""
    from temporalio.service import RPCError

    from activities.analytics.models import SCHEDULE_ID
    from operations.posts import RECONCILE_SCHEDULE_ID
    from operations.retention import RETENTION_SCHEDULE_ID

    async def remove() -> None:
        # Each site's ids name its task queue (site_schedule_id): the bare ones, and those listed (the
        # list lags a creation by moments; one missed is on a queue no later test uses).
        listed = [schedule.id async for schedule in await dev_env.client.list_schedules()]
        for schedule_id in {SCHEDULE_ID, RECONCILE_SCHEDULE_ID, RETENTION_SCHEDULE_ID, *listed}:
            if schedule_id.startswith((SCHEDULE_ID, RECONCILE_SCHEDULE_ID, RETENTION_SCHEDULE_ID)):
                with contextlib.suppress(RPCError):  # not created, or removed meanwhile
                    await dev_env.client.get_schedule_handle(schedule_id).delete()

    await remove()
    yield
    await remove()


TEST_LINK_SECRET = "test-members-link-secret"  # the members secret of every test's settings
TEST_ADDRESS_HASH_KEY = "test-address-hash-key-0123456789"  # as the development stack, every test's settings have one


def make_settings(postgres_url: str, simulator: MailgunSimulator, **overrides) -> Settings:
    """Settings for one test: its own task queue, the test database and the simulator.

    An uncertain send is confirmed within seconds, not Mailgun's 30 minutes: the simulator's
    late events are late by less than that (tests/adversaries.py); a send waits seconds, not
    minutes, for an unreachable Mailgun.
    """
    overrides = {"members_link_secret": TEST_LINK_SECRET, "address_hash_key": TEST_ADDRESS_HASH_KEY,
                 "send_confirm_window_seconds": 4,
                 "send_confirm_poll_seconds": 0.5,
                 "provider_outage_first_wait_seconds": 1, "provider_outage_max_wait_seconds": 4, **overrides}
    return load_settings(database_url=postgres_url, mailgun_base_url=simulator.base_url,
                         mailgun_api_key=simulator.api_key, mailgun_domain=simulator.domain,
                         task_queue=f"test-{uuid.uuid4().hex[:12]}", **overrides)


@pytest.fixture
def settings(postgres_url: str, mailgun: MailgunSimulator, db: asyncpg.Pool) -> Settings:
    return make_settings(postgres_url, mailgun)


@pytest.fixture
def newsletter_settings(postgres_url, mailgun, db):
    """Settings with small batches, so a few thousand members make several batches."""
    def build(**overrides):
        return make_settings(postgres_url, mailgun, **{"batch_size": 1000, **overrides})
    return build



@pytest.fixture
def outbox_settings(postgres_url, mailgun, db):
    def build(**overrides):
        return make_settings(postgres_url, mailgun, outbox_backoff_seconds=[1], outbox_poll_interval_seconds=0.2,
                             **overrides)
    return build


@pytest.fixture
async def relay(dev_env, outbox_settings):
    """A worker and the relay on this test's task queue; the relay is stopped afterwards."""
    settings = outbox_settings()
    async with running_worker(dev_env.client, settings):
        await ensure_relay(dev_env.client, settings)
        yield settings
        await dev_env.client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{settings.task_queue}").terminate()


@pytest.fixture
def webhook_settings(postgres_url, mailgun, db) -> Settings:
    return make_settings(postgres_url, mailgun, webhook_signing_key=mailgun.webhook_signing_key,
                         analytics_end_margin_seconds=0, analytics_trust_threshold_seconds=300)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items) -> None:
    """A crash or fault test is slow as well: `-m "not slow"` leaves every one of them out.

    The slow tests run first (in their order, as the rest keep theirs): pytest-xdist's workers then
    share out the short ones at the end, instead of one worker finishing a minute-long test alone.
    """
    for item in items:
        if item.get_closest_marker("crash") or item.get_closest_marker("fault"):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)

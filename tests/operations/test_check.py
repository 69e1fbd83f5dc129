"""`pressroom check` as an operator runs it: each unreachable service is named, a healthy stack passes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from devstack.servers import free_port
from tests.dns_server import dns_server
from tests.foundation.test_cli import assert_one_line_error, pressroom
from tests.newsletter.test_failures import wait_until

ROOT = Path(__file__).resolve().parents[2]


BASE_SERVICES = ("PostgreSQL", "Temporal", "Mailgun")
RUNNING_NEEDS = ("Workers", "Schedules", "Outbox relay", "Webhook inbox", "Senders", "Reputation")


@pytest.fixture
async def healthy_env(postgres_url, dev_env, mailgun) -> AsyncIterator[dict[str, str]]:
    # The sending domain publishes DMARC (a DNS server of the test's own: the machine may have none).
    async with dns_server({"_dmarc.example.com": "v=DMARC1; p=quarantine"}) as nameserver:
        yield {**base_env(postgres_url, dev_env, mailgun), "PRESSROOM_DNS_NAMESERVERS": nameserver}


def base_env(postgres_url, dev_env, mailgun) -> dict[str, str]:
    return {"DATABASE_URL": postgres_url, "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
            "MAILGUN_BASE_URL": mailgun.base_url, "MAILGUN_API_KEY": mailgun.api_key,
            "MAILGUN_DOMAIN": mailgun.domain, "PRESSROOM_TASK_QUEUE": f"check-{uuid.uuid4().hex[:8]}",
            # The session's Temporal server ends a long poll after 5 s (tests/conftest.py): a live
            # worker is seen within 15 s, a stopped one is gone after them.
            "PRESSROOM_WORKER_SEEN_WITHIN_SECONDS": "15"}


def spawn_worker(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "starter", "worker"], cwd=ROOT, env={**os.environ, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def lines_of(result) -> dict[str, str]:
    """{service: its line}, from `ok   Service: …` and `FAIL Service: …`."""
    found = {}
    for line in result.stdout.splitlines():
        for service in BASE_SERVICES + RUNNING_NEEDS:
            if line[5:].startswith(f"{service}:"):
                found[service] = line
    return found


async def check(env: dict[str, str]):
    """Run the command in a thread: the simulator answers from this test's event loop."""
    return await asyncio.to_thread(pressroom, "check", env=env)


async def test_a_healthy_configuration_with_a_worker_passes_and_a_stopped_worker_is_named(
        healthy_env, db, schedules_removed_after):
    worker = spawn_worker(healthy_env)
    try:
        async def passes() -> bool:
            return (await check(healthy_env)).returncode == 0
        await wait_until(passes, 240)  # a busy machine: the worker starts and answers slowly
        result = await check(healthy_env)
        as_json = json.loads((await asyncio.to_thread(pressroom, "check", "--json", env=healthy_env)).stdout)
    finally:
        worker.terminate()
        worker.wait()
    lines = lines_of(result)
    assert set(lines) == set(BASE_SERVICES + RUNNING_NEEDS) and len(result.stdout.splitlines()) == 9, result.stdout
    assert all(line.startswith("ok   ") for line in lines.values()), result.stdout
    assert f"polling task queue {healthy_env['PRESSROOM_TASK_QUEUE']}" in lines["Workers"]
    assert as_json["ok"] is True and [s["service"] for s in as_json["services"]] == list(BASE_SERVICES + RUNNING_NEEDS)

    # The worker is gone (Temporal forgets a stopped worker's polls), and a pushed event waits.
    await db.execute("INSERT INTO webhook_inbox (provider, kind, event, received_at) "
                     "VALUES ('mailgun', 'delivered', '{}', now() - interval '10 minutes')")
    try:
        async def named() -> bool:
            return lines_of(await check(healthy_env))["Workers"].startswith("FAIL")
        await wait_until(named, 90)
        result = await check(healthy_env)
    finally:
        await db.execute("DELETE FROM webhook_inbox")
    assert_one_line_error(result, "Workers", "not ready")
    lines = lines_of(result)
    # Named at once by the relay's unanswered query, then by the polls Temporal forgets.
    assert ("no worker is polling task queue" in lines["Workers"] or "no worker is answering" in lines["Workers"]) \
        and "`pressroom worker`" in lines["Workers"]
    assert lines["Webhook inbox"].startswith("FAIL") and "1 pushed event waiting" in lines["Webhook inbox"]
    assert lines["Schedules"].startswith("ok") and lines["Outbox relay"].startswith("ok")


async def test_with_no_worker_ever_check_says_what_is_missing(healthy_env):
    result = await check(healthy_env)
    lines = lines_of(result)
    assert result.returncode == 1 and all(lines[s].startswith("ok") for s in BASE_SERVICES), result.stdout
    assert lines["Workers"].startswith("FAIL") and "start one with `pressroom worker`" in lines["Workers"]
    assert lines["Outbox relay"].startswith("FAIL") and "is not running" in lines["Outbox relay"]
    assert lines["Webhook inbox"].startswith("FAIL")


@pytest.mark.parametrize("variable, value, service, words", [
    ("DATABASE_URL", "postgresql://pressroom@127.0.0.1:{port}/x", "PostgreSQL", "cannot connect to PostgreSQL"),
    ("TEMPORAL_ADDRESS", "127.0.0.1:{port}", "Temporal", "cannot connect to Temporal"),
    ("TEMPORAL_NAMESPACE", "no-such-namespace", "Temporal", "Namespace no-such-namespace is not found"),
    ("MAILGUN_BASE_URL", "http://127.0.0.1:{port}", "Mailgun", "Mailgun could not be reached"),
    ("MAILGUN_API_KEY", "key-wrong", "Mailgun", "API key was refused"),
])
async def test_each_broken_service_is_named(healthy_env, variable, value, service, words):
    env = {**healthy_env, variable: value.format(port=free_port())}
    result = await check(env)
    assert_one_line_error(result, service, "not ready")
    failures = [line for service, line in lines_of(result).items() if line.startswith("FAIL")
                and service in BASE_SERVICES]
    assert len(failures) == 1 and service in failures[0] and words in failures[0], result.stdout
    assert "key-wrong" not in result.stdout + result.stderr


async def test_an_outdated_schema_says_to_migrate(healthy_env, postgres_server):
    name = f"empty_{free_port()}"
    admin = await asyncpg.connect(postgres_server.url)
    await admin.execute(f"CREATE DATABASE {name}")
    await admin.close()
    result = await check({**healthy_env, "DATABASE_URL": postgres_server.url.rsplit("/", 1)[0] + f"/{name}"})
    assert result.returncode == 1
    assert "pressroom migrate" in result.stdout

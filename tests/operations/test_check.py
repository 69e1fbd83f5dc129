"""`pressroom check` as an operator runs it: each unreachable service is named, a healthy stack passes."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from devstack.servers import free_port
from tests.foundation.test_cli import assert_one_line_error, pressroom


@pytest.fixture
def healthy_env(postgres_url, dev_env, mailgun) -> dict[str, str]:
    return {"DATABASE_URL": postgres_url, "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
            "MAILGUN_BASE_URL": mailgun.base_url, "MAILGUN_API_KEY": mailgun.api_key,
            "MAILGUN_DOMAIN": mailgun.domain}


async def check(env: dict[str, str]):
    """Run the command in a thread: the simulator answers from this test's event loop."""
    return await asyncio.to_thread(pressroom, "check", env=env)


async def test_a_healthy_configuration_passes(healthy_env):
    result = await check(healthy_env)
    assert result.returncode == 0, result.stdout + result.stderr
    for service in ("PostgreSQL", "Temporal", "Mailgun"):
        assert f"ok   {service}" in result.stdout


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
    failures = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
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

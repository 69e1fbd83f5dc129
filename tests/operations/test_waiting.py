"""Waiting that tells the truth: a command waiting on a run says when no worker polls its queue."""

from __future__ import annotations

import asyncio
import os
import sys
import time

from tests import command_line
from tests.newsletter.conftest import seed_email
from worker import running_worker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def cli_env(settings, dev_env, **extra: str) -> dict[str, str]:
    """The variables a `pressroom` process needs to use this test's servers and task queue."""
    return {**os.environ, "DATABASE_URL": settings.database_url,
            "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
            "PRESSROOM_TASK_QUEUE": settings.task_queue, "MAILGUN_BASE_URL": settings.mailgun_base_url,
            "MAILGUN_API_KEY": settings.mailgun_api_key.get_secret_value(), "MAILGUN_DOMAIN": settings.mailgun_domain,
           "PRESSROOM_MEMBERS_LINK_SECRET": settings.members_link_secret.get_secret_value(),
            "PRESSROOM_ADDRESS_HASH_KEY": settings.address_hash_key.get_secret_value(),
            **extra}


async def start_cli(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(sys.executable, "-m", "starter", *args, cwd=ROOT, env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def cli(*args: str, env: dict[str, str], timeout: float = 120) -> tuple[int, str, str]:
    """Run a `pressroom` command without blocking the test's event loop (a worker may run in it)."""
    done = await asyncio.to_thread(command_line.run, list(args), env, timeout)
    return done.returncode, done.stdout, done.stderr


async def test_send_wait_says_no_worker_polls_then_keeps_waiting(dev_env, settings, db, mailgun):
    seeded = await seed_email(db, members=5)
    process = await start_cli("newsletter", "send", seeded.email_id, "--wait", env=cli_env(settings, dev_env))
    try:
        began = time.monotonic()
        expected = (f"note: no worker is polling task queue {settings.task_queue}; start one with `pressroom worker`")
        said = []
        while expected not in said:
            line = await asyncio.wait_for(process.stderr.readline(), 120)  # a fresh interpreter, on a busy machine
            assert line, f"the command ended without saying it: {said}"
            said.append(line.decode().strip())
        print(f"\nthe no-worker message came {time.monotonic() - began:.1f} s after the command started")
        assert process.returncode is None  # still waiting
        async with running_worker(dev_env.client, settings):
            out, err = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
    assert process.returncode == 0, err
    assert f"email {seeded.email_id}: submitted" in out.decode()
    assert len(mailgun.messages) == 1


async def test_a_queue_with_a_worker_gets_no_warning(dev_env, settings, db):
    from operations.waiting import has_worker

    assert await has_worker(dev_env.client, settings.task_queue) is False
    async with running_worker(dev_env.client, settings):
        async def polled() -> bool:
            return bool(await has_worker(dev_env.client, settings.task_queue))
        from tests.newsletter.test_failures import wait_until
        await wait_until(polled, 20)
        seeded = await seed_email(db, members=5)
        code, out, err = await cli("newsletter", "send", seeded.email_id, "--wait", env=cli_env(settings, dev_env))
    assert code == 0, err
    assert "no worker" not in err and "submitted" in out

"""Status and waiting commands tell the truth when the worker has died: they say what the run waits
for (in the Web UI's words) and that no worker answers, instead of failing or waiting silently; a
command on a finished run answers from its history. A real `pressroom worker` process is killed."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.newsletter.conftest import seed_email
from tests.newsletter.test_failures import wait_until
from tests.operations.test_waiting import cli, cli_env, start_cli
from tests.operations.test_worker_stop import schedules_removed_after, start_worker  # noqa: F401 (fixture)


async def status_of(email_id: str, env) -> dict:
    code, out, err = await cli("newsletter", "status", email_id, "--json", env=env)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.crash
async def test_a_capped_send_says_why_it_waits_and_that_its_dead_worker_does_not_answer(
        dev_env, settings, db, mailgun, schedules_removed_after):  # noqa: F811
    seeded = await seed_email(db, members=30)
    env = cli_env(settings, dev_env)
    worker = start_worker(settings, dev_env, PRESSROOM_BATCH_SIZE="10", PRESSROOM_DAILY_SEND_LIMIT="10")
    try:
        code, _, err = await cli("newsletter", "send", seeded.email_id, env=env)
        assert code == 0, err

        async def capped() -> bool:
            waiting = (await status_of(seeded.email_id, env))["waiting_for"] or ""
            return waiting.startswith("waiting for the daily limit of ")
        await wait_until(capped, 90, worker)
        live = await status_of(seeded.email_id, env)
        assert live["run"]["worker_answering"] is True and live["progress"]["batches_sent"] == 1
        code, out, err = await cli("newsletter", "status", seeded.email_id, env=env)
        assert code == 0, err
        assert "waits for: waiting for the daily limit of " in out and ", resumes at " in out
        assert "now: sending: 1/3 batches sent, 0 failed; 10/30 recipients; waiting for the daily limit" in out
    finally:
        worker.kill()
        worker.wait()

    # Killed: Temporal still lists it as polling, and nothing answers the run's queries.
    began = time.monotonic()
    dead = await status_of(seeded.email_id, env)
    print(f"\n`newsletter status --json` with a dead worker answered in {time.monotonic() - began:.1f} s")
    assert dead["run"]["status"] == "running" and dead["run"]["worker_answering"] is False
    assert dead["progress"] is None and dead["batches"] == {"total": 3, "submitted": 1, "failed": 0}
    # What it waits for is read from the run's history: the cap's timer, in the same words.
    assert dead["waiting_for"].startswith("no worker is answering; waiting for the daily limit of "), dead
    code, out, err = await cli("newsletter", "status", seeded.email_id, env=env)
    assert code == 0, err
    assert "waits for: no worker is answering; waiting for the daily limit of " in out, out + err
    assert "error" not in err and "no worker is answering (a query got no answer within 3 s" in err

    process = await start_cli("newsletter", "follow", seeded.email_id, env=env)
    try:
        said = []
        while not any("no worker is answering" in line for line in said):
            line = await asyncio.wait_for(process.stderr.readline(), 60)
            assert line, f"follow ended without saying it: {said}"
            said.append(line.decode())
        assert process.returncode is None  # and keeps waiting
        while True:
            line = await asyncio.wait_for(process.stdout.readline(), 60)
            assert line, "follow never said what the run waits for"
            if line.decode().startswith("waits for: no worker is answering; waiting for the daily limit of "):
                break
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    print(f"`newsletter follow` said so {time.monotonic() - began:.1f} s after the kill")


async def test_follow_on_a_finished_send_answers_from_its_history_without_a_worker(dev_env, settings, db, mailgun):
    from worker import running_worker

    seeded = await seed_email(db, members=3)
    env = cli_env(settings, dev_env)
    async with running_worker(dev_env.client, settings):
        code, out, err = await cli("newsletter", "send", seeded.email_id, "--wait", env=env)
        assert code == 0 and "submitted" in out, err
    began = time.monotonic()
    code, out, err = await cli("newsletter", "follow", seeded.email_id, "--json", env=env)
    print(f"\n`newsletter follow` on a finished send, no worker: {time.monotonic() - began:.1f} s")
    assert code == 0, err
    assert json.loads(out)["status"] == "submitted" and "no worker" not in err
    status = await status_of(seeded.email_id, env)
    assert status["run"]["status"] == "completed" and status["waiting_for"] is None

"""Status and waiting commands tell the truth when the worker has died: they say what the run waits
for (in the Web UI's words) and that no worker answers, instead of failing or waiting silently; a
command on a finished run answers from its history. A real `pressroom worker` process is killed."""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest

from tests.newsletter.conftest import seed_email
from tests.newsletter.test_failures import wait_until
from tests.operations.test_waiting import cli, cli_env, start_cli
from tests.operations.test_worker_stop import start_worker


async def status_of(email_id: str, env) -> dict:
    code, out, err = await cli("newsletter", "status", email_id, "--json", env=env)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.crash
async def test_a_capped_send_says_why_it_waits_and_that_its_dead_worker_does_not_answer(
        dev_env, settings, db, mailgun, schedules_removed_after):
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
        # One count of batches on the screen: the batches' line; the run's line says what it does.
        assert "batches: 1/3 submitted, 0 failed; 30 recipients" in out
        assert "now: sending; waiting for the daily limit" in out and "batches sent" not in out
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
    assert "error" not in err and re.search(r"no worker is answering \(a query got no answer within [\d.]+ s", err)

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


def text_waits_for(out: str) -> str | None:
    lines = [line.removeprefix("waits for: ") for line in out.splitlines() if line.startswith("waits for: ")]
    return lines[0] if lines else None


async def test_status_with_a_watcher_after_a_kill_9_answers_in_both_forms_alike(
        dev_env, settings, db, mailgun, schedules_removed_after):
    from operations.newsletter import newsletter_status

    seeded = await seed_email(db, members=30)
    env = cli_env(settings, dev_env)
    worker = start_worker(settings, dev_env, PRESSROOM_BATCH_SIZE="10", PRESSROOM_DAILY_SEND_LIMIT="10")
    watcher = None
    try:
        code, _, err = await cli("newsletter", "send", seeded.email_id, env=env)
        assert code == 0, err

        async def capped() -> bool:
            return ((await status_of(seeded.email_id, env))["waiting_for"] or "").startswith("waiting for the daily")
        await wait_until(capped, 90, worker)
        watcher = await start_cli("newsletter", "follow", seeded.email_id, env=env)  # another watcher, querying
        worker.kill()  # SIGKILL: no goodbye to Temporal, which lists it as polling for a while
        worker.wait()

        began = time.monotonic()
        code, out, err = await cli("newsletter", "status", seeded.email_id, "--json", env=env)
        took = time.monotonic() - began
        assert code == 0, err
        answer = json.loads(out)  # stdout carries the JSON alone
        code, text, text_err = await cli("newsletter", "status", seeded.email_id, env=env)
        assert code == 0, text_err
        began = time.monotonic()
        direct = await newsletter_status(seeded.email_id, settings=settings.model_copy(
            update={"temporal_address": dev_env.client.service_client.config.target_host}))
        in_process = time.monotonic() - began
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        if watcher is not None and watcher.returncode is None:
            watcher.kill()
            await watcher.wait()
    print(f"\n`newsletter status --json` with a watcher, after kill -9: {took:.1f} s (process start included), "
          f"{in_process:.1f} s in process (connection included)")
    assert direct.run is not None and direct.run.worker_answering is False
    assert answer["run"]["status"] == "running" and answer["temporal"] is None
    assert answer["run"]["worker_answering"] is False and answer["progress"] is None
    assert answer["waiting_for"].startswith("no worker is answering; waiting for the daily limit of "), answer
    # The text form says the same, from the same computation.
    assert text_waits_for(text) == answer["waiting_for"]
    assert re.search(r"no worker is answering \(a query got no answer within [\d.]+ s", text_err)


async def test_status_with_temporal_down_shows_what_postgresql_holds(dev_env, settings, db, mailgun):
    from devstack.servers import free_port

    seeded = await seed_email(db, members=3)
    env = cli_env(settings, dev_env, TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")  # nothing listens there
    code, out, err = await cli("newsletter", "status", seeded.email_id, "--json", env=env)
    assert code == 0, err
    answer = json.loads(out)
    assert answer["status"] == "pending" and answer["run"] is None and answer["batches"]["total"] == 0
    assert "cannot connect to Temporal at 127.0.0.1:" in answer["temporal"]
    assert answer["temporal"].endswith("shown is what PostgreSQL holds")
    code, text, text_err = await cli("newsletter", "status", seeded.email_id, env=env)
    assert code == 0, text_err
    assert f"email {seeded.email_id}: pending" in text and "run: newsletter-" in text
    assert "unknown: Temporal is unreachable" in text and "cannot connect to Temporal at" in text_err


async def test_status_against_a_temporal_that_never_answers_is_bounded(settings, db):
    """A frontend that takes the connection and says nothing: the status answers from PostgreSQL,
    saying Temporal did not answer within the bound, instead of hanging on the SDK's retries."""
    from operations.newsletter import newsletter_status

    held = []

    async def hold(reader, writer) -> None:
        held.append(writer)  # accept, never answer

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    seeded = await seed_email(db, members=2)
    try:
        answer = await newsletter_status(seeded.email_id,
                                         settings=settings.model_copy(update={"temporal_address": f"127.0.0.1:{port}"}))
    finally:
        for writer in held:
            writer.close()
        server.close()
    assert answer.status == "pending" and answer.run is None
    assert answer.temporal == (f"Temporal at 127.0.0.1:{port} did not answer within 3 s; "
                                  "shown is what PostgreSQL holds")


@pytest.mark.crash
async def test_status_of_a_send_whose_worker_was_killed_mid_send_answers_with_the_databases_figures(
        dev_env, settings, db, mailgun, schedules_removed_after):
    """SIGKILL while a batch is in flight at the provider: Temporal still lists the worker as polling
    and nothing answers the run's query; status answers anyway, with PostgreSQL's figures, and says
    the worker does not answer (how long it took: printed; bench/commands.py measures it)."""
    seeded = await seed_email(db, members=30)
    env = cli_env(settings, dev_env)
    mailgun.set_faults(latency_ms=3000)  # each batch is in flight for 3 s
    worker = start_worker(settings, dev_env, PRESSROOM_BATCH_SIZE="10")
    try:
        code, _, err = await cli("newsletter", "send", seeded.email_id, env=env)
        assert code == 0, err

        async def in_flight() -> bool:
            return await db.fetchval("SELECT count(*) FROM email_batches WHERE email_id = $1 AND status = 'submitting'",
                                     seeded.email_id) > 0
        await wait_until(in_flight, 90, worker)
    finally:
        worker.kill()  # mid-send, no goodbye to Temporal
        worker.wait()
    figures = await db.fetchrow(
        "SELECT count(*) AS total, count(*) FILTER (WHERE status = 'submitted') AS submitted, "
        "count(*) FILTER (WHERE status = 'failed') AS failed, "
        "(SELECT count(*) FROM email_recipients WHERE email_id = $1) AS recipients "
        "FROM email_batches WHERE email_id = $1", seeded.email_id)
    began = time.monotonic()
    answer = await status_of(seeded.email_id, env)
    print(f"\n`newsletter status --json` after kill -9 mid-send: {time.monotonic() - began:.1f} s (process start "
          "included)")
    assert answer["batches"] == {"total": figures["total"], "submitted": figures["submitted"],
                                 "failed": figures["failed"]}
    assert answer["recipients"] == figures["recipients"] == 30 and figures["total"] == 3
    assert answer["status"] == "submitting" and answer["temporal"] is None
    assert answer["run"]["status"] == "running" and answer["progress"] is None
    assert answer["run"]["worker_answering"] is False, answer["run"]
    assert answer["waiting_for"].startswith("no worker is answering"), answer

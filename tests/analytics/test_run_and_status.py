"""`analytics run --wait` follows the run and prints what it did; a paused schedule says "paused"."""

from __future__ import annotations

import json

from operations.analytics import analytics_pause, analytics_schedule, analytics_schedule_id
from tests.operations.test_waiting import cli, cli_env
from worker import running_worker

from .conftest import address, seed_newsletter

ANALYTICS_ENV = {"PRESSROOM_ANALYTICS_END_MARGIN_SECONDS": "0", "PRESSROOM_ANALYTICS_TRUST_THRESHOLD_SECONDS": "300"}


async def test_run_wait_follows_the_run_and_prints_what_it_fetched_and_applied(dev_env, db, mailgun,
                                                                               analytics_settings):
    client = dev_env.client
    env = cli_env(analytics_settings, dev_env, **ANALYTICS_ENV)
    await seed_newsletter(db, members=3, emails=1)
    mailgun.add_synthetic_events(email_id="e0", recipients=[address(0), address(1)], events=["delivered", "opened"])
    await analytics_schedule(analytics_settings, client)
    try:
        async with running_worker(client, analytics_settings):
            code, out, err = await cli("analytics", "run", "--wait", env=env)
            assert code == 0, err
            assert "following email-analytics" in err
            lines = out.splitlines()
            latest = next(line for line in lines if line.startswith("latest-opened"))
            assert "fetched       2 events, applied       2" in latest  # the opened events come first
            assert any(line.startswith("latest ") and "applied       2" in line for line in lines), out
            assert "run finished: 4 events" in out and "aggregates" in out

            code, out, err = await cli("analytics", "run", "--wait", "--json", env=env)
            assert code == 0, err
            result = json.loads(out)
            assert set(result) == {"started_at", "now", "phases", "aggregate", "capped", "error"}
            assert [p["phase"] for p in result["phases"]] == ["latest-opened", "latest", "missing", "backfill"]
            assert set(result["phases"][0]) >= {"phase", "events", "applied", "unknown", "malformed", "by_type",
                                                "pages", "seconds", "capped", "cursor", "lag_seconds"}
            assert sum(p["events"] for p in result["phases"]) == 0  # the first run read them all
    finally:
        await client.get_schedule_handle(analytics_schedule_id(analytics_settings)).delete()
    assert await db.fetchval("SELECT count(opened_at) FROM email_recipients") == 2


async def test_run_wait_without_a_worker_says_so(dev_env, db, mailgun, analytics_settings):
    import asyncio

    from tests.operations.test_waiting import start_cli

    client = dev_env.client
    await analytics_schedule(analytics_settings, client)
    process = await start_cli("analytics", "run", "--wait", env=cli_env(analytics_settings, dev_env, **ANALYTICS_ENV))
    try:
        said = []
        while not any("no worker is polling task queue" in line for line in said):
            line = await asyncio.wait_for(process.stderr.readline(), 120)  # a fresh interpreter, on a busy machine
            assert line, said
            said.append(line.decode())
        assert analytics_settings.task_queue in said[-1]
        async with running_worker(client, analytics_settings):
            out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, err
        assert "run finished" in out.decode()
    finally:
        if process.returncode is None:
            process.kill()
        await client.get_schedule_handle(analytics_schedule_id(analytics_settings)).delete()


async def test_a_paused_schedule_says_paused(dev_env, db, mailgun, analytics_settings):
    client = dev_env.client
    env = cli_env(analytics_settings, dev_env)
    await analytics_schedule(analytics_settings, client)
    try:
        await analytics_pause(True, analytics_settings, client)
        code, out, err = await cli("analytics", "status", env=env)
        assert code == 0, err
        assert f"schedule {analytics_schedule_id(analytics_settings)}: paused" in out
        assert "next run: none while paused" in out and "next run: 2" not in out
        code, out, err = await cli("analytics", "status", "--json", env=env)
        status = json.loads(out)
        assert set(status) == {"exists", "schedule_id", "paused", "note", "next", "recent", "running", "cursors",
                               "runs", "backfills", "rejected"}
        assert status["rejected"] == {"total": 0, "by_reason": {}, "last_at": None}
        assert status["paused"] is True and status["next"] == []

        await analytics_pause(False, analytics_settings, client)
        status = json.loads((await cli("analytics", "status", "--json", env=env))[1])
        assert status["paused"] is False and len(status["next"]) >= 1
    finally:
        await client.get_schedule_handle(analytics_schedule_id(analytics_settings)).delete()


async def test_status_before_the_schedule_exists_says_so(dev_env, db, analytics_settings):
    """Right after the demo (or before a worker's first start) there is no schedule: said, not failed on."""
    env = cli_env(analytics_settings, dev_env)
    code, out, err = await cli("analytics", "status", env=env)
    assert code == 0, err
    assert f"schedule {analytics_schedule_id(analytics_settings)}: not created yet" in out
    code, out, err = await cli("analytics", "status", "--json", env=env)
    assert code == 0, err
    status = json.loads(out)
    assert status["exists"] is False and status["paused"] is None and status["running"] == []

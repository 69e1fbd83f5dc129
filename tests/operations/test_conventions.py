"""The basics an operator expects of a command line: --version, completion, help with value types,
--json on every read command, errors that say what to do, plurals, one line per log event."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

from devstack.servers import free_port
from tests.foundation.test_cli import assert_one_line_error, pressroom, pressroom_each
from tests.newsletter.conftest import seed_email
from tests.operations.test_waiting import cli, cli_env


def test_version_completion_and_help_with_value_types():
    from importlib.metadata import version

    shown = pressroom("--version")
    assert shown.returncode == 0 and shown.stdout.strip() == f"pressroom {version('pressroom')}"
    # Typer detects the shell from the parent processes unless told to take the one named, and a
    # test run need not have a shell above it.
    completion = pressroom("--show-completion", "bash", env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert completion.returncode == 0 and "_pressroom_completion" in completion.stdout
    *helps, members_list, members_show = pressroom_each(
        *((*command, "--help") for command in (["newsletter", "send"], ["members", "list"], ["outbox", "list"],
                                               ["limits", "show"], ["check"])),
        ("members", "list", "--help"), ("members", "show", "--help"))
    for text in (result.stdout for result in helps):
        assert "<bool>" not in text and "<str>" not in text and "<int" not in text, text
    assert "INTEGER" in members_list.stdout
    assert "ID|ADDRESS" in members_show.stdout


def test_temporal_stopped_is_one_line_that_says_what_to_do(postgres_url, db):
    address = f"127.0.0.1:{free_port()}"  # nothing listens there: Temporal is stopped
    result = pressroom("newsletter", "follow", "e1", env={"TEMPORAL_ADDRESS": address, "DATABASE_URL": postgres_url})
    assert_one_line_error(result, f"cannot connect to Temporal at {address}", "`pressroom dev up`",
                          "check TEMPORAL_ADDRESS")
    assert "tonic" not in result.stderr and "Connection refused" in result.stderr


async def test_check_and_limits_show_answer_in_json(dev_env, settings, db, mailgun):
    env = cli_env(settings, dev_env, PRESSROOM_DAILY_SEND_LIMIT="500")
    code, out, err = await cli("check", "--json", env=env)
    checked = json.loads(out)
    # No worker runs here: the services are reachable, and what running needs is named as missing.
    assert code == 1 and checked["ok"] is False, err
    ok = {s["service"]: s["ok"] for s in checked["services"]}
    assert ok["PostgreSQL"] and ok["Temporal"] and ok["Mailgun"] and ok["Workers"] is False
    assert all(set(s) == {"service", "ok", "warning", "state", "detail"} for s in checked["services"])
    code, out, err = await cli("limits", "show", "--json", env=env)
    assert code == 0, err
    [domain] = json.loads(out)["domains"]
    assert domain["domain"] == settings.mailgun_domain and domain["daily_limit"] == 500 and domain["sent_today"] == 0


async def test_one_scheduled_post_is_one(dev_env, settings, db):
    from operations.posts import stop_publication

    env = cli_env(settings, dev_env)
    seeded = await seed_email(db, members=1)
    at = datetime.now(UTC) + timedelta(days=1)
    await db.execute("UPDATE posts SET status = 'scheduled', published_at = $2 WHERE id = $1", seeded.post_id, at)
    try:
        code, out, err = await cli("posts", "reconcile", env=env)
        assert code == 0, err
        assert out.startswith("1 scheduled post started or moved, 0 stray timers stopped"), out
        code, out, err = await cli("posts", "status", seeded.post_id, env=env)
        assert code == 0 and f"({at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC)" in out, out + err
    finally:
        await stop_publication(dev_env.client, seeded.post_id)


def test_a_log_event_is_one_line_and_its_traceback_only_when_debugging(capfd, monkeypatch):
    from pressroom import logs

    def log_a_failure() -> list[str]:
        try:
            raise ValueError("refused for reader@example.com with key-secret")
        except ValueError:
            logging.getLogger("pressroom.test").warning("batch failed", exc_info=True)
        logging.getLogger("httpx").info("HTTP Request: POST https://api.mailgun.net/v3/… 200 OK")
        return [line for line in capfd.readouterr().err.splitlines() if line]

    monkeypatch.delenv("PRESSROOM_DEBUG", raising=False)
    logs.configure(secrets=["key-secret"])
    [line] = log_a_failure()
    assert line.startswith(tuple("0123456789")) and "WARNING pressroom.test batch failed error='ValueError: refused " \
        "for <address> with ***'" in line, line
    monkeypatch.setenv("PRESSROOM_DEBUG", "1")
    logs.configure(secrets=["key-secret"])
    lines = log_a_failure()
    assert "Traceback (most recent call last):" in lines and len(lines) > 3
    logging.getLogger().handlers[:] = []

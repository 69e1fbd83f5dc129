"""The README's first command, as a newcomer runs it: the demo to its closing table, twice."""

from __future__ import annotations

import re

import pytest

from devstack.servers import free_port
from tests.foundation.test_cli import dev_down_and_forget, pressroom


@pytest.fixture
def demo_env(tmp_path):
    env = {f"PRESSROOM_DEV_{name}_PORT": str(free_port()) for name in ("POSTGRES", "TEMPORAL", "UI", "SIMULATOR",
                                                                               "SES")}
    env["PRESSROOM_HOME"] = str(tmp_path / "home")
    yield env
    dev_down_and_forget(env)


def figure(report: str, name: str) -> int:
    found = re.search(rf"^{name}\s+([\d,]+)", report, re.M)
    assert found, report
    return int(found.group(1).replace(",", ""))


@pytest.mark.slow
def test_the_demo_runs_to_its_report_and_again_on_the_same_data(demo_env):
    first = pressroom("demo", "--members", "60", "--publish-in", "3", env=demo_env, timeout=240)
    assert first.returncode == 0, first.stdout + first.stderr
    out = " ".join(first.stdout.split())
    assert "welcome email sent" in out and "Post: published" in out and "Newsletter: submitted" in out
    report = first.stdout[first.stdout.index("Report (pressroom newsletter report "):]
    recipients, delivered, opened, failed = (figure(report, name) for name in ("recipients", "delivered", "opened",
                                                                                "failed"))
    assert "opens over time" in report and "Who did not get it and why: pressroom members list --left-out-of" in out
    assert "Traceback" not in first.stdout + first.stderr
    # A temporary failure is neither delivered nor failed: the simulator makes 3% of them.
    assert recipients == 60 and delivered > 0 and delivered + failed <= 60 and 0 < opened <= delivered
    # The simulator's readers followed links through the demo's front door.
    clicked = re.search(r"^clicked: ([\d,]+) members? \(", report, re.M)
    assert clicked and 0 < int(clicked.group(1)) <= delivered, report
    assert "https://temporal.io/" in report or "https://ghost.org/docs/newsletters/" in report
    assert f"http://localhost:{demo_env['PRESSROOM_DEV_UI_PORT']}" in out
    assert "keeps running in the background" in out and "pressroom dev down stops it" in out
    assert "the designed email as a reader gets it: pressroom newsletter preview " in out

    again = pressroom("demo", "--members", "60", "--publish-in", "2", env=demo_env, timeout=240)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already running" in again.stdout and "Newsletter: submitted" in again.stdout


def test_the_demo_runs_on_ses_through_the_stand_in_and_its_pushed_events(demo_env):
    env = {**demo_env, "PRESSROOM_EMAIL_PROVIDER": "ses"}
    run = pressroom("demo", "--members", "60", "--publish-in", "3", env=env, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    out = " ".join(run.stdout.split())
    assert "SES stand-in" in out and "Mailgun simulator" not in out
    assert "/webhooks/ses" in out and "welcome email sent" in out and "Newsletter: submitted" in out
    assert "Traceback" not in run.stdout + run.stderr
    report = run.stdout[run.stdout.index("Report (pressroom newsletter report "):]
    # The stand-in accepts and delivers every copy and its readers open each: all of it came
    # through SNS pushes to the receiver and the inbox, nothing was fetched.
    recipients, delivered, opened, failed = (figure(report, name) for name in ("recipients", "delivered", "opened",
                                                                                "failed"))
    assert recipients >= 60 and delivered == opened == recipients and failed == 0
    assert re.search(r"^clicked: [1-9][\d,]* members? ", report, re.M), report

    # Later commands use the stack's provider without the variable: `dev env` names it and the
    # stand-in, and the stand-in's certificate is the only development trust it hands out.
    listed = pressroom("dev", "env", env=demo_env)
    assert listed.returncode == 0, listed.stderr
    assert "export PRESSROOM_EMAIL_PROVIDER=ses" in listed.stdout
    assert f"export PRESSROOM_SES_ENDPOINT_URL=http://127.0.0.1:{demo_env['PRESSROOM_DEV_SES_PORT']}" in listed.stdout
    assert "PRESSROOM_SES_SNS_DEV_CERTIFICATE=" in listed.stdout and "MAILGUN_API_KEY" not in listed.stdout

"""The README's first command, as a newcomer runs it: the demo to its closing table, twice."""

from __future__ import annotations

import re

import pytest

from devstack.servers import free_port
from tests.foundation.test_cli import dev_down_and_forget, pressroom


@pytest.fixture
def demo_env(tmp_path):
    env = {f"PRESSROOM_DEV_{name}_PORT": str(free_port()) for name in ("POSTGRES", "TEMPORAL", "UI", "SIMULATOR")}
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
    assert recipients == 60 and 0 < delivered and delivered + failed <= 60 and 0 < opened <= delivered
    assert f"http://localhost:{demo_env['PRESSROOM_DEV_UI_PORT']}" in out
    assert "keeps running in the background" in out and "pressroom dev down stops it" in out

    again = pressroom("demo", "--members", "60", "--publish-in", "2", env=demo_env, timeout=240)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already running" in again.stdout and "Newsletter: submitted" in again.stdout

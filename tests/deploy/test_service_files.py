"""The service files in deploy/systemd/: systemd's own verifier takes them, the worker's stop timeout
leaves room for its drain, the services wait for the migrations, and the environment file names every
setting a deployment must give (docs/production.md "Service files")."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pressroom.settings import _ALIASES, DEPRECATED_VARIABLES, ConfigurationError, Settings
from worker import GRACEFUL_SHUTDOWN

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
ENV_TEMPLATE = UNITS / "pressroom.env.example"
INSTALLED = "/opt/pressroom/venv/bin/pressroom"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze") or "/usr/bin/systemd-analyze"
SERVICES = ("worker", "serve", "codec-server", "migrate")


def unit(name: str) -> dict[str, dict[str, list[str]]]:
    """A unit's sections and their keys, each with every value it is given (systemd allows repeats)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for line in (UNITS / f"pressroom-{name}.service").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def seconds(value: str) -> float:
    """A systemd time span such as `35s`, `1min 5s` or `35`, in seconds."""
    scale = {"": 1, "s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600, "ms": 0.001}
    return sum(float(number) * scale[suffix] for number, suffix in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value))


def assigned(text: str, *, commented_too: bool) -> set[str]:
    pattern = r"^#?([A-Z][A-Z0-9_]*)=" if commented_too else r"^([A-Z][A-Z0-9_]*)="
    return set(re.findall(pattern, text, flags=re.MULTILINE))


def test_systemd_verifies_the_units_with_the_installed_command(tmp_path):
    if not Path(SYSTEMD_ANALYZE).exists():
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    installed = Path(sys.executable).with_name("pressroom")
    assert installed.exists(), f"{installed}: the venv's pressroom, installed with pip install -e ."
    for name in SERVICES:
        text = (UNITS / f"pressroom-{name}.service").read_text()
        assert INSTALLED in text, f"pressroom-{name}.service runs {INSTALLED}"
        (tmp_path / f"pressroom-{name}.service").write_text(text.replace(INSTALLED, str(installed)).replace(
            "/etc/pressroom/pressroom.env", str(tmp_path / "pressroom.env")))
    shutil.copy(ENV_TEMPLATE, tmp_path / "pressroom.env")

    result = subprocess.run([SYSTEMD_ANALYZE, "verify", *sorted(map(str, tmp_path.glob("*.service")))],
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr.strip()) == (0, ""), result.stderr


def test_the_verifier_refuses_a_unit_that_names_no_executable(tmp_path):
    """The check above can fail: verify reads ExecStart, requirements and time values."""
    if not Path(SYSTEMD_ANALYZE).exists():
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    broken = (UNITS / "pressroom-worker.service").read_text().replace(
        INSTALLED, str(tmp_path / "no-such-pressroom"))
    (tmp_path / "pressroom-worker.service").write_text(broken)
    result = subprocess.run([SYSTEMD_ANALYZE, "verify", str(tmp_path / "pressroom-worker.service")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "no-such-pressroom" in result.stderr


def test_the_worker_stops_on_sigterm_with_room_for_its_drain():
    service = unit("worker")["Service"]
    assert service["KillSignal"] == ["SIGTERM"]
    # SIGTERM to the main process only; SIGKILL to what is left only once the timeout is over.
    assert service["KillMode"] == ["mixed"]
    drain = GRACEFUL_SHUTDOWN.total_seconds()
    stop = seconds(service["TimeoutStopSec"][0])
    # The drain, then the pool and the provider's client closed: at least 10 s more, and not minutes.
    assert drain + 10 <= stop <= drain + 60, (drain, stop)
    assert unit("serve")["Service"]["KillSignal"] == ["SIGTERM"]


def test_the_services_that_use_the_database_wait_for_the_migrations():
    migrate = unit("migrate")["Service"]
    assert migrate["Type"] == ["oneshot"]
    assert migrate["RemainAfterExit"] == ["yes"]  # stays active, so a later start of a service finds it done
    assert migrate["ExecStart"] == [f"{INSTALLED} migrate"]
    for name in ("worker", "serve"):
        sections = unit(name)
        assert "pressroom-migrate.service" in " ".join(sections["Unit"]["Requires"]), name
        assert "pressroom-migrate.service" in " ".join(sections["Unit"]["After"]), name
        assert sections["Service"]["ExecStart"][0].startswith(f"{INSTALLED} {name}"), name
    # The codec server reads no database: a failed migration must not take the histories' view with it.
    assert "Requires" not in unit("codec-server")["Unit"]
    assert all("/etc/pressroom/pressroom.env" in unit(name)["Service"]["EnvironmentFile"] for name in SERVICES)


def required_variables() -> set[str]:
    """Every variable a `require_…` check of the settings refuses to go on without, found by asking each
    check with nothing set and giving it what it named until it is satisfied."""
    found: set[str] = set()
    checks = [name for name in dir(Settings) if name.startswith("require_")]
    assert checks, "the settings' require_ checks"
    for check in checks:
        settings = Settings.model_construct()  # the defaults, no environment, no development stack
        for _ in range(10):
            try:
                getattr(settings, check)()
                break
            except ConfigurationError as error:
                variable = str(error).split()[0]
                field = next(field for field, name in _ALIASES.items() if name == variable)
                found.add(variable)
                value = "postgresql://x@h/db" if field == "database_url" else "set"
                settings = settings.model_copy(update={field: type(getattr(settings, field))(value)})
    return found


def production_table() -> set[str]:
    """The variables of docs/production.md's first configuration table (the operator's contract)."""
    text = (ROOT / "docs" / "production.md").read_text()
    table = text.split("## Configuration", 1)[1].split("\n\n", 2)[1]
    return set(re.findall(r"`([A-Z][A-Z0-9_]+)`", "\n".join(row.split("|")[1] for row in table.splitlines()
                                                             if row.startswith("| `"))))


def test_the_environment_file_sets_every_required_setting_and_names_the_documented_ones():
    text = ENV_TEMPLATE.read_text()
    required = required_variables()
    assert {"DATABASE_URL", "MAILGUN_API_KEY", "MAILGUN_DOMAIN", "PRESSROOM_MEMBERS_LINK_SECRET"} <= required
    assert required - assigned(text, commented_too=False) == set()
    contract = {"DATABASE_URL", "TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "PRESSROOM_TASK_QUEUE",
                "MAILGUN_API_KEY", "MAILGUN_DOMAIN", "MAILGUN_BASE_URL"}  # DESIGN.md's configuration contract
    assert contract - assigned(text, commented_too=False) == set()
    documented = production_table()
    assert contract <= documented
    assert documented - assigned(text, commented_too=True) == set()
    # No name in it that Pressroom does not read (a typo is a setting silently left at its default).
    unknown = assigned(text, commented_too=True) - set(_ALIASES.values()) - set(DEPRECATED_VARIABLES)
    assert unknown == set()

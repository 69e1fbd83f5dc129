"""`dev up`'s Temporal dev server started again when a port of its own choosing was taken first."""

import subprocess
import sys

import pytest

from devstack import servers
from devstack.servers import DevStackError, free_port, start_temporal_dev_server

TAKEN = "listen tcp 127.0.0.1:36639: bind: address already in use"
# Stands in for the server: listens on the frontend's and the UI's ports until killed.
LISTEN = """
import socket, sys, time
held = []
for port in sys.argv[1:]:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(port))); s.listen(); held.append(s)
time.sleep(600)
"""


def fake_servers(monkeypatch, outcomes: list[str], port: int, ui_port: int) -> list[subprocess.Popen]:
    """Each start of the server is the next outcome: "taken" exits at once saying a port was in use,
    "listens" opens the two ports."""
    started: list[subprocess.Popen] = []

    def spawn(args, log, **_):
        outcome = outcomes[len(started)]
        with open(log, "a") as out:
            code = f"print({TAKEN!r})" if outcome == "taken" else LISTEN
            process = subprocess.Popen([sys.executable, "-c", code, str(port), str(ui_port)], stdout=out)
        started.append(process)
        return process

    monkeypatch.setattr(servers, "_spawn", spawn)
    return started


def start(tmp_path, port: int, ui_port: int) -> subprocess.Popen:
    return start_temporal_dev_server(port=port, ui_port=ui_port, db_file=tmp_path / "t.db",
                                     log=tmp_path / "temporal.log", search_attributes={})


def test_a_port_taken_by_another_program_at_start_starts_the_server_again(monkeypatch, tmp_path):
    port, ui_port = free_port(), free_port()
    started = fake_servers(monkeypatch, ["taken", "listens"], port, ui_port)
    process = start(tmp_path, port, ui_port)
    try:
        assert process is started[1] and process.poll() is None
    finally:
        process.kill()
        process.wait()


def test_a_server_that_keeps_finding_a_port_taken_is_an_error_naming_it(monkeypatch, tmp_path):
    port, ui_port = free_port(), free_port()
    started = fake_servers(monkeypatch, ["taken"] * servers.TEMPORAL_START_ATTEMPTS, port, ui_port)
    with pytest.raises(DevStackError, match="address already in use"):
        start(tmp_path, port, ui_port)
    assert len(started) == servers.TEMPORAL_START_ATTEMPTS

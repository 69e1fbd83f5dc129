"""`pressroom` commands for tests: each a real process of its own, forked from one that has already
imported the command line.

A command run as `python -m starter` spends most of its time importing (Temporal, pydantic, asyncpg,
the commands); the suite runs hundreds of them. Here one server process per test worker imports
them once; each command is a child forked from it that takes the test's environment, working
folder, arguments and its own stdout and stderr, runs `starter.main` and then finalises its
interpreter as `python -m starter` does. Its exit status is the command's. What needs the process
itself (a worker to kill, a command whose output is read while it runs) still starts one with
`subprocess`; tests/foundation/test_exit.py runs commands in fresh interpreters too.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The server: imports the command line, then for each request forks a handler (so that it never
# waits itself), which forks the command and reports its pid and then its exit status.
SERVER = r"""
import gc, json, os, pkgutil, importlib, select, signal, socket, sys
import starter
for name in starter.COMMANDS:
    starter.load(name)
# What a command imports once it runs; no Temporal runtime, event loop or connection exists yet.
for package in ("commands", "operations", "pressroom"):
    for module in pkgutil.walk_packages([package], prefix=package + "."):
        importlib.import_module(module.name)
import temporalio.client, temporalio.envconfig, asyncpg, httpx
gc.freeze()  # the children's collections skip, and so do not copy, what they share

server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(sys.argv[1])
server.listen(64)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
print("ready", flush=True)


def run_command(request):
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(os.open(request["stdout"], os.O_WRONLY | os.O_TRUNC), 1)
    os.dup2(os.open(request["stderr"], os.O_WRONLY | os.O_TRUNC), 2)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)
    starter.main(request["args"])  # SystemExit: the interpreter finalises as `python -m starter`'s does


while True:
    ready, _, _ = select.select([server, sys.stdin], [], [])
    if sys.stdin in ready:  # the test worker has gone
        sys.exit(0)
    connection, _ = server.accept()
    if os.fork() == 0:
        server.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        request = json.loads(connection.makefile("r").readline())
        pid = os.fork()
        if pid == 0:
            connection.close()
            run_command(request)
        connection.sendall(f"{pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
        os._exit(0)
    connection.close()
"""

_lock = threading.Lock()
_server: tuple[subprocess.Popen, str] | None = None


def _address() -> str:
    """The server's socket, started on first use and stopped when the test worker exits."""
    global _server
    with _lock:
        if _server is None or _server[0].poll() is not None:
            folder = tempfile.mkdtemp(prefix="pressroom-cli-")
            address = os.path.join(folder, "server.sock")
            process = subprocess.Popen([sys.executable, "-c", SERVER, address], cwd=ROOT, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True)
            if process.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the command server did not start (status {process.wait()})")
            atexit.register(process.kill)
            _server = (process, address)
        return _server[1]


def run(args: list[str], env: dict[str, str], timeout: float = 60, cwd: Path | str = ROOT
        ) -> subprocess.CompletedProcess:
    """Run `pressroom ARGS` as `subprocess.run(..., capture_output=True, text=True)` would.

    PRESSROOM_TEST_FRESH_COMMANDS=1 runs each in a fresh interpreter instead."""
    command = [sys.executable, "-m", "starter", *args]
    if os.environ.get("PRESSROOM_TEST_FRESH_COMMANDS"):
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
    with tempfile.TemporaryDirectory(prefix="pressroom-cli-") as folder:
        stdout, stderr = Path(folder, "stdout"), Path(folder, "stderr")
        stdout.touch(0o600)
        stderr.touch(0o600)
        request = {"args": list(args), "env": dict(env), "cwd": str(cwd), "stdout": str(stdout),
                   "stderr": str(stderr)}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(timeout)
            connection.connect(_address())
            connection.sendall((json.dumps(request) + "\n").encode())
            answers = connection.makefile("r")
            pid = int(answers.readline())
            try:
                status = int(answers.readline())
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(command, timeout) from None
        return subprocess.CompletedProcess(command, status, stdout.read_text(errors="replace"),
                                           stderr.read_text(errors="replace"))

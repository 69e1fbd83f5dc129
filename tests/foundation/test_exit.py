"""The command line exits cleanly: no Temporal thread outlives a command into interpreter shutdown.

A Tokio thread of the Temporal runtime still finishing an RPC's callback while Python finalises
aborts the process (`PyGILState_Release ... finalizing`, exit 134 or 139) after the command
succeeded. The CLI closes the runtime, joining those threads, before it returns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A joined thread is still listed in /proc for a moment after pthread_join returns (the kernel
# wakes the joiner before it releases the task; longer on a loaded machine): count the threads
# until only the main one is left, up to a deadline, and name any that stay.
AFTER_COMMAND = """
import os, sys, time, starter
status = starter.run_command(sys.argv[1:])
deadline = time.monotonic() + 20
while len(os.listdir("/proc/self/task")) > 1 and time.monotonic() < deadline:
    time.sleep(0.05)
tasks = os.listdir("/proc/self/task")
names = [open(f"/proc/self/task/{tid}/comm").read().strip() for tid in tasks if tid != str(os.getpid())]
print("status", status, "threads", len(tasks), "others", names)
"""


def run_in_process(args: list[str], env: dict[str, str]) -> tuple[int, int]:
    """Run one command through starter.run_command in a fresh Python; its status and the threads left."""
    result = subprocess.run([sys.executable, "-c", AFTER_COMMAND, *args], cwd=ROOT, capture_output=True,
                            text=True, env={**os.environ, **env}, timeout=300)
    assert result.returncode == 0, result.stderr
    print(result.stdout)  # the names of any thread left, shown when an assertion below fails
    words = result.stdout.split()
    return int(words[words.index("status") + 1]), int(words[words.index("threads") + 1])


def temporal_env(dev_env, **extra: str) -> dict[str, str]:
    return {"TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host, **extra}


def test_a_command_that_used_temporal_leaves_only_the_main_thread(dev_env):
    assert run_in_process(["temporal", "setup"], temporal_env(dev_env)) == (0, 1)


def test_a_command_refused_by_temporal_also_leaves_only_the_main_thread(dev_env, postgres_url):
    # The error's traceback holds the client until it is reported; the runtime is closed after that.
    status, threads = run_in_process(["posts", "schedule", "p-exit", "--at", "2030-01-01T00:00:00+00:00"],
                                     temporal_env(dev_env, TEMPORAL_NAMESPACE="no-such-namespace",
                                                  DATABASE_URL=postgres_url))
    assert (status, threads) == (1, 1)


# Each command runs in a child forked from one interpreter that has already imported the CLI: the
# child runs the command, counts the threads it left (as AFTER_COMMAND does) and then finalises
# exactly as `python -m starter` does (SystemExit at the top level), which is where the abort
# happens; the imports, paid once, were most of each run's cost.
FORKED_COMMANDS = """
import gc, json, os, sys, tempfile, time, starter
count, at_once, args = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
starter.load("check")
# What the command imports (no runtime exists yet); anything missing is imported by each child.
import commands.failures, pressroom.codec, pressroom.logs, pressroom.temporal, temporalio.client, temporalio.envconfig
gc.freeze()  # the children's collections (close_runtime's) skip, and so do not copy, what they share
folder = tempfile.mkdtemp(prefix="pressroom-exit-")
running, results, started = {}, {}, 0
while started < count or running:
    while started < count and len(running) < at_once:
        pid = os.fork()
        if pid == 0:
            for fd, name in ((1, "out"), (2, "err")):
                os.dup2(os.open(f"{folder}/{name}-{started}", os.O_WRONLY | os.O_CREAT, 0o600), fd)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            status = starter.run_command(args)
            deadline = time.monotonic() + 20
            while len(os.listdir("/proc/self/task")) > 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            with open(f"{folder}/threads-{started}", "w") as threads:
                threads.write(str(len(os.listdir("/proc/self/task"))))
            sys.exit(status)
        running[pid] = started
        started += 1
    pid, status = os.wait()
    number = running.pop(pid)
    results[number] = {"status": os.waitstatus_to_exitcode(status),
                       "threads": int(open(f"{folder}/threads-{number}").read() or 0),
                       "stdout": open(f"{folder}/out-{number}").read(),
                       "stderr": open(f"{folder}/err-{number}").read()}
print(json.dumps([results[n] for n in range(count)]))
"""


@pytest.mark.slow
@pytest.mark.timeout(1200)  # PRESSROOM_EXIT_TEST_COMMANDS=500 one after another: minutes on a busy machine
def test_many_commands_four_at_a_time_all_exit_cleanly(dev_env):
    """40 commands (PRESSROOM_EXIT_TEST_COMMANDS for a longer run), four at a time, each reaching
    Temporal, leaving only its main thread and then finalising its interpreter: every one exits 0
    with its line, none aborts at exit.

    The thread count is what catches a runtime left running: with close_runtime and the safety net
    both removed, 500 such commands all still exited 0, while every one left two Tokio threads."""
    count = int(os.environ.get("PRESSROOM_EXIT_TEST_COMMANDS", "40"))
    forked = subprocess.run([sys.executable, "-c", FORKED_COMMANDS, str(count), "4", "temporal", "setup"],
                            cwd=ROOT, capture_output=True, text=True, timeout=1100,
                            env={**os.environ, **temporal_env(dev_env)})
    assert forked.returncode == 0, forked.stderr[-2000:]
    results = json.loads(forked.stdout)
    assert len(results) == count
    statuses = {}
    for result in results:
        statuses[result["status"]] = statuses.get(result["status"], 0) + 1
    reasons = {}
    for result in results:
        if result["status"] != 0:
            last = (result["stderr"].strip().splitlines() or ["no output"])[-1][:120]
            reasons[last] = reasons.get(last, 0) + 1
    print(f"{count} commands, four at a time: exit statuses {statuses}; failures {reasons}")
    crashed = [r["stderr"] for r in results if r["status"] != 0]
    assert not crashed, f"{len(crashed)} of {count} failed; first: {crashed[0][-500:]}"
    assert all("every search attribute is already registered" in r["stdout"] for r in results)
    left = [r["threads"] for r in results if r["threads"] != 1]
    assert not left, f"{len(left)} of {count} commands left threads running: {left[:10]}"


def test_a_thread_left_running_ends_the_command_without_finalising_and_keeps_its_status():
    """The safety net behind close_runtime: a thread still alive after the command (a native one
    would abort finalisation) makes `main` end with os._exit, the output flushed, the status kept."""
    script = ("import threading, time, starter\n"
              "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
              "starter.main(['--version'])\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.startswith("pressroom "), result.stderr
    script = script.replace("starter.main(['--version'])", "print(starter.threads_outlive_command(0.2))\n"
                            "import sys; sys.exit(0)")
    assert subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=60).stdout.strip() == "True"
    alone = subprocess.run([sys.executable, "-c", "import starter; print(starter.threads_outlive_command(0.2))"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert alone.stdout.strip() == "False", alone.stderr

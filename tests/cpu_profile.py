"""Where the suite's CPU goes, per test and per kind of process: an opt-in pytest plugin.

    PYTHONPATH=. .venv/bin/pytest -n 2 -p tests.cpu_profile   # then:
    .venv/bin/python -m tests.cpu_profile                     # the report (PRESSROOM_CPU_PROFILE: its folder)

Each test is charged with the CPU its xdist worker's process tree spent from its setup to its end:
the worker itself, every live descendant (the session's Temporal and PostgreSQL servers, workers and
commands it started) and what they reaped (/proc's utime, stime, cutime, cstime). A thread samples
the tree every quarter second to count the processes a run starts, by kind. Processes that nobody
in the tree reaps (the command server's children, reaped by the kernel) are seen only by sampling.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import sys
import threading
import time
from pathlib import Path

FOLDER = Path(os.environ.get("PRESSROOM_CPU_PROFILE", "/tmp/pressroom-cpu-profile"))
TICK = os.sysconf("SC_CLK_TCK")
KINDS = (("start-dev", "Temporal dev server"), ("temporal-test-server", "Temporal time-skipping server"),
         ("-m worker", "pressroom worker"), ("-m starter", "pressroom command (fresh interpreter)"),
         ("import gc, json, os, pkgutil", "forked command (tests/command_line.py)"),
         ("exec(eval(", "xdist worker"), ("mypy", "mypy"), ("chromium", "Chromium"))

_seen: dict[int, list] = {}  # pid -> [kind, cpu seconds when last seen]
_started: dict[str, tuple[float, float]] = {}
_tests: list[dict] = []


def _stat(pid: int) -> tuple[int, str, float, float] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[1]), text[text.index("(") + 1:text.rindex(")")],
            (int(fields[11]) + int(fields[12])) / TICK, (int(fields[13]) + int(fields[14])) / TICK)


def _tree() -> dict[int, tuple[int, str, float, float]]:
    """This process and its live descendants."""
    processes = {int(name): stat for name in os.listdir("/proc") if name.isdigit() and (stat := _stat(int(name)))}
    children = collections.defaultdict(list)
    for pid, stat in processes.items():
        children[stat[0]].append(pid)
    tree, stack = {}, [os.getpid()]
    while stack:
        pid = stack.pop()
        if pid in processes:
            tree[pid] = processes[pid]
        stack.extend(children[pid])
    return tree


def _cpu() -> float:
    return sum(own + reaped for _, _, own, reaped in _tree().values())


def _kind(pid: int, name: str) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        command = ""
    found = next((kind for mark, kind in KINDS if mark in command), None)
    return found or ("PostgreSQL" if name == "postgres" else name)


def _sample() -> None:
    while True:
        for pid, (_, name, own, _) in _tree().items():
            if pid not in _seen:
                _seen[pid] = [_kind(pid, name), own]
            _seen[pid][1] = own
        time.sleep(0.25)


def pytest_configure(config) -> None:
    FOLDER.mkdir(parents=True, exist_ok=True)
    threading.Thread(target=_sample, daemon=True).start()


def pytest_runtest_setup(item) -> None:
    _started[item.nodeid] = (time.monotonic(), _cpu())


def pytest_runtest_logfinish(nodeid, location) -> None:
    if nodeid in _started:
        wall, cpu = _started.pop(nodeid)
        _tests.append({"test": nodeid, "wall": time.monotonic() - wall, "cpu": _cpu() - cpu})


def pytest_unconfigure(config) -> None:
    name = os.environ.get("PYTEST_XDIST_WORKER", "main")
    (FOLDER / f"{name}.json").write_text(json.dumps({"tests": _tests, "total": _cpu(),
                                                     "processes": list(_seen.values())}))


def report(folder: Path = FOLDER, top: int = 30) -> None:
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    tests, kinds, total = [], collections.defaultdict(lambda: [0, 0.0]), 0.0
    for path in glob.glob(str(folder / "gw*.json")) or glob.glob(str(folder / "main.json")):
        data = json.loads(Path(path).read_text())
        total += data["total"]
        for test in data["tests"]:
            record = files[test["test"].split("::")[0]]
            record[0] += test["cpu"]
            record[1] += test["wall"]
            record[2] += 1
            tests.append((test["cpu"], test["wall"], test["test"]))
        for kind, cpu in data["processes"]:
            kinds[kind][0] += 1
            kinds[kind][1] += cpu
    print(f"CPU of the workers' process trees: {total:.0f} s\n\nCPU s  wall s  tests  file")
    for name, (cpu, wall, count) in sorted(files.items(), key=lambda item: -item[1][0])[:top]:
        print(f"{cpu:6.1f} {wall:7.1f} {count:6d}  {name}")
    print("\nCPU s  wall s  test")
    for cpu, wall, name in sorted(tests, reverse=True)[:top]:
        print(f"{cpu:6.1f} {wall:7.1f}  {name}")
    print("\nprocesses  CPU s (as last sampled)  kind")
    for kind, (count, cpu) in sorted(kinds.items(), key=lambda item: -item[1][1])[:top]:
        print(f"{count:9d} {cpu:8.1f}  {kind}")


if __name__ == "__main__":
    report(Path(sys.argv[1]) if len(sys.argv) > 1 else FOLDER)

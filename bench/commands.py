"""Benchmark: how quickly commands answer (not a test).

1. The command line's start: N runs each of `pressroom --version`, `pressroom --help`, every
   group's `--help` (`pressroom newsletter --help`, …) and one command's own (`pressroom newsletter
   status --help`: its module and what it runs imported), beside the raw floor measured in the same
   run: a bare `python -c pass` and `python -c "import typer._click"` (Typer's own click, which the
   command line is built on). Each as p50 and max wall time of fresh processes, p50 over the floor,
   and the CPU seconds (user + system) of the p50 run: on a busy machine, the wall time a quiet one
   would show.
2. `newsletter status` of a send whose worker was just killed: its own PostgreSQL, Temporal dev
   server and Mailgun simulator (200 members, batches of 10, 3 s per request so that batches are
   in flight), a `pressroom worker` process started, the send started, the worker SIGKILLed once a
   batch is in flight, then `pressroom newsletter status EMAIL --json` run M times as a process of
   its own: wall time p50 and max, and the figures it answered beside PostgreSQL's.

The load average is printed at the start and the end: on a shared machine every wall time moves
with it.

    .venv/bin/python bench/commands.py --runs 10 --status-runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx

import starter
from bench.newsletter import SEED
from bench.servers import SIMULATOR_DOMAIN, SIMULATOR_KEY, bench_servers
from pressroom import database
from pressroom.settings import load_settings

PRESSROOM = [sys.executable, "-m", "starter"]
MEMBERS = 200



def load() -> str:
    return " ".join(f"{figure:.2f}" for figure in os.getloadavg())


def wall_times(command: list[str], runs: int, env: dict[str, str] | None = None) -> list[float]:
    return [wall_and_cpu(command, env)[0] for _ in range(runs)]


def wall_and_cpu(command: list[str], env: dict[str, str] | None) -> tuple[float, float]:
    """One fresh process: its wall time, and the CPU seconds it (and its children) spent."""
    before = os.times()
    began = time.perf_counter()
    subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - began
    after = os.times()
    return wall, after.children_user + after.children_system - before.children_user - before.children_system


def start_times(runs: int) -> None:
    # A bare environment but for PATH: no OTEL_* variables, no settings of this shell's.
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp")}
    rows = [("python -c pass", [sys.executable, "-c", "pass"]),
            ("python -c 'import typer._click'", [sys.executable, "-c", "import typer._click"]),
            ("pressroom --version", [*PRESSROOM, "--version"]),
            ("pressroom --help", [*PRESSROOM, "--help"])]
    groups = [path for path in starter.COMMANDS if any(other.startswith(f"{path} ") for other in starter.COMMANDS)]
    rows += [(f"pressroom {group} --help", [*PRESSROOM, *group.split(), "--help"]) for group in groups]
    rows.append(("pressroom newsletter status --help", [*PRESSROOM, "newsletter", "status", "--help"]))
    wall_times(rows[-1][1], 1, env)  # compiled bytecode in place before anything is timed
    print(f"the command line's start: {runs} fresh processes each (load {load()})")
    floor = None
    for name, command in rows:
        runs_of = sorted(wall_and_cpu(command, env) for _ in range(runs))
        wall, cpu = runs_of[len(runs_of) // 2]
        floor = floor or wall
        print(f"  {name:42} p50 {wall:6.3f} s  max {runs_of[-1][0]:6.3f} s  {wall / floor:5.1f}x python -c pass"
              f"  CPU {cpu:5.2f} s")


async def status_after_kill(runs: int) -> None:
    async with bench_servers(simulator=True) as servers:
        base_url = servers.simulator_url
        httpx.post(f"{base_url}/_sim/faults", json={"latency_ms": 3000})
        address = servers.env.client.service_client.config.target_host
        settings = load_settings(database_url=servers.database_url, mailgun_base_url=base_url,
                                 mailgun_api_key=SIMULATOR_KEY, mailgun_domain=SIMULATOR_DOMAIN, task_queue="bench",
                                 members_link_secret="bench-link-secret", temporal_address=address)
        env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp"),
               "DATABASE_URL": servers.database_url, "TEMPORAL_ADDRESS": address, "PRESSROOM_TASK_QUEUE": "bench",
               "MAILGUN_BASE_URL": base_url, "MAILGUN_API_KEY": SIMULATOR_KEY, "MAILGUN_DOMAIN": SIMULATOR_DOMAIN,
               "PRESSROOM_MEMBERS_LINK_SECRET": "bench-link-secret", "PRESSROOM_BATCH_SIZE": "10"}
        pool = await database.connect(settings.require_database(), max_size=2)
        await pool.execute(SEED.format(members=MEMBERS, tag="c"))  # the send bench's site, smaller
        worker = subprocess.Popen([*PRESSROOM, "worker"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            subprocess.run([*PRESSROOM, "newsletter", "send", "e1"], cwd=ROOT, env=env, check=True,
                           stdout=subprocess.DEVNULL)
            while not await pool.fetchval("SELECT count(*) FROM email_batches WHERE status = 'submitting'"):
                if worker.poll() is not None:
                    raise SystemExit(f"the worker exited ({worker.returncode}) before a batch was in flight")
                await asyncio.sleep(0.05)
        finally:
            worker.send_signal(signal.SIGKILL)
            worker.wait()
        figures = await pool.fetchrow(
            "SELECT count(*) AS total, count(*) FILTER (WHERE status = 'submitted') AS submitted FROM email_batches")
        await pool.close()
        print(f"`newsletter status e1 --json` after SIGKILL of its worker mid-send, {runs} fresh processes "
              f"(load {load()}):")
        times, answer = [], {}
        for _ in range(runs):
            began = time.perf_counter()
            done = subprocess.run([*PRESSROOM, "newsletter", "status", "e1", "--json"], cwd=ROOT, env=env,
                                  capture_output=True, text=True, check=True)
            times.append(time.perf_counter() - began)
            answer = json.loads(done.stdout)
        print(f"  wall p50 {statistics.median(times):.2f} s  max {max(times):.2f} s  "
              "(target ≤ 5 s at the suite's load)")
        print(f"  answered: batches {answer['batches']['submitted']}/{answer['batches']['total']} submitted "
              f"(PostgreSQL: {figures['submitted']}/{figures['total']}), run {answer['run']['status']}, worker "
              f"answering {answer['run']['worker_answering']}, waits for: {answer['waiting_for']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="fresh processes per start figure (0: none)")
    parser.add_argument("--status-runs", type=int, default=5,
                        help="`newsletter status` runs after the kill (0: none, and no servers started)")
    args = parser.parse_args()
    print(f"load at start: {load()}")
    if args.runs:
        start_times(args.runs)
    if args.status_runs:
        asyncio.run(status_after_kill(args.status_runs))
    print(f"load at end: {load()}")


if __name__ == "__main__":
    main()

"""What a benchmark's processes cost: CPU time by process family, and a worker's peak memory (Linux /proc).

On a shared machine wall-clock figures move with everyone else's load; the CPU a run's own
processes spent (this process, the Temporal server and PostgreSQL it started) moves much less.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[str, int, float] | None:
    """(command, parent pid, CPU seconds of the process and its reaped children)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone meanwhile
        return None
    name = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return name, int(fields[1]), (utime + stime + cutime + cstime) / CLOCK_TICKS


def cpu_seconds_by_family(root: int | None = None) -> Counter[str]:
    """CPU seconds spent so far by `root` (default: this process) and its descendants, summed by
    family: "temporal" (the dev server), "postgres" (server and backends), "python" (this process
    and any worker it spawned)."""
    root = root or os.getpid()
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = stat
    children: dict[int, list[int]] = {}
    for pid, (_, parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    totals: Counter[str] = Counter()
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid not in stats:
            continue
        name, _, seconds = stats[pid]
        family = "temporal" if name.startswith("temporal") else "postgres" if name.startswith("postgres") else "python"
        totals[family] += seconds
        todo.extend(children.get(pid, []))
    return totals


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise LookupError(f"no VmHWM for process {pid}")


def rss_mb(pid: int) -> float:
    """The process's resident set now (VmRSS), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise LookupError(f"no VmRSS for process {pid}")


def stop_server(server: subprocess.Popen | None) -> None:
    """A server the bench started, stopped as an operator would (SIGTERM, then SIGKILL after 30 s)
    and reaped."""
    if server is None or server.poll() is not None:
        return
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()

"""The servers a benchmark runs against: its own PostgreSQL, Temporal dev server and simulator."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from devstack.servers import Postgres, find_binary, free_port, start_simulator, stop_process
from pressroom import database
from pressroom.temporal import SEARCH_ATTRIBUTES, data_converter

SIMULATOR_KEY, SIMULATOR_DOMAIN = "key-bench-00000000", "mg.bench.example"


@dataclass(frozen=True)
class BenchServers:
    database_url: str
    env: WorkflowEnvironment
    simulator_url: str | None


@asynccontextmanager
async def bench_servers(*, simulator: bool = False) -> AsyncIterator[BenchServers]:
    """Fresh, migrated PostgreSQL; a Temporal dev server; and the simulator as its own process."""
    folder = Path(tempfile.mkdtemp(prefix="pressroom-bench-"))
    postgres = Postgres(folder / "postgres", free_port())
    postgres.start(durable=False)
    sim = None
    env = None
    try:
        if simulator:
            port = free_port()
            sim = start_simulator(port=port, api_key=SIMULATOR_KEY, domain=SIMULATOR_DOMAIN,
                                  log=folder / "simulator.log")
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=find_binary("temporal"), data_converter=data_converter(),
            search_attributes=SEARCH_ATTRIBUTES, dev_server_extra_args=["--log-level", "error"])
        await database.migrate(postgres.url)
        yield BenchServers(postgres.url, env, f"http://127.0.0.1:{port}" if simulator else None)
    finally:
        if env is not None:
            await env.shutdown()
        if sim is not None:
            stop_process(sim.pid)
        postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)

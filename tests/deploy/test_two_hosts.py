"""Several workers on several hosts (docs/production.md "Running it for real"): two workers, each in a
network namespace of its own (two hosts on one machine), reach PostgreSQL, Temporal and the provider
only through their own link; the one holding a send mid-batch is cut off (its link down, the process
still running, as in a network partition), and the other finishes the send with every member once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from operations.newsletter import start_newsletter
from tests.newsletter.conftest import seed_email
from tests.newsletter.test_failures import KILLED_WORKER_SETTINGS, wait_until, worker_log
from tests.newsletter.test_send import delivered

ROOT = Path(__file__).resolve().parents[2]


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


def namespaces_unavailable() -> str:
    """Why this machine cannot make network namespaces, or "" when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"pr-probe-{uuid.uuid4().hex[:6]}"
    made = _ip("netns", "add", probe)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip()}"
    _ip("netns", "delete", probe)
    return ""


if why := namespaces_unavailable():
    pytest.skip(why, allow_module_level=True)


class Host:
    """A network namespace joined to this one by a veth pair: `address` is this side's, where the
    namespace finds the services; `cut()` takes the link down."""

    def __init__(self, name: str, subnet: int) -> None:
        self.name, self.outside = name, f"{name[:8]}o"
        self.address, self.inside_address = f"10.213.{subnet}.1", f"10.213.{subnet}.2"

    def make(self) -> None:
        for command in (["netns", "add", self.name],
                        ["link", "add", self.outside, "type", "veth", "peer", "name", "eth0", "netns", self.name],
                        ["addr", "add", f"{self.address}/30", "dev", self.outside],
                        ["link", "set", self.outside, "up"],
                        ["netns", "exec", self.name, "ip", "addr", "add", f"{self.inside_address}/30", "dev", "eth0"],
                        ["netns", "exec", self.name, "ip", "link", "set", "eth0", "up"],
                        ["netns", "exec", self.name, "ip", "link", "set", "lo", "up"]):
            result = _ip(*command)
            assert result.returncode == 0, f"ip {' '.join(command)}: {result.stderr}"

    def cut(self) -> None:
        assert _ip("link", "set", self.outside, "down").returncode == 0

    def remove(self) -> None:
        _ip("link", "delete", self.outside)
        _ip("netns", "delete", self.name)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.CancelledError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def forwarding(address: str, ports: list[int]) -> AsyncIterator[None]:
    """Each port of this machine's loopback offered on `address` too (the services listen on loopback).
    At the end every relayed connection is closed, as a host gone for good resets them: until then, a
    session of the cut-off host blocked on its answer holds its locks in PostgreSQL (PostgreSQL's own
    `tcp_user_timeout` ends such sessions in production)."""
    relayed: list[asyncio.StreamWriter] = []

    async def serve(port: int):
        async def relay(reader, writer) -> None:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", port)
            relayed.extend((writer, upstream_writer))
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        return await asyncio.start_server(relay, address, port)

    servers = [await serve(port) for port in ports]
    try:
        yield
    finally:
        for server in servers:
            server.close()
        for writer in relayed:
            writer.transport.abort()


def spawn_on(host: Host, settings, temporal_port: int, pg_port: int, sim_port: int) -> subprocess.Popen:
    database = urlsplit(settings.database_url)
    env = {**os.environ,
           "DATABASE_URL": database._replace(netloc=f"{database.username}:{database.password}@"
                                                    f"{host.address}:{pg_port}").geturl(),
           "TEMPORAL_ADDRESS": f"{host.address}:{temporal_port}", "PRESSROOM_TASK_QUEUE": settings.task_queue,
           "MAILGUN_BASE_URL": f"http://{host.address}:{sim_port}",
           "MAILGUN_API_KEY": settings.mailgun_api_key.get_secret_value(), "MAILGUN_DOMAIN": settings.mailgun_domain,
           "PRESSROOM_MEMBERS_LINK_SECRET": settings.members_link_secret.get_secret_value(),
           "PRESSROOM_BATCH_SIZE": str(settings.batch_size), "PRESSROOM_SEND_CONCURRENCY": "2",
           "PRESSROOM_PROVIDER_RETRY_SECONDS": "0.5",
           "PRESSROOM_SEND_CONFIRM_WINDOW_SECONDS": str(settings.send_confirm_window_seconds),
           "PRESSROOM_SEND_CONFIRM_POLL_SECONDS": str(settings.send_confirm_poll_seconds), **KILLED_WORKER_SETTINGS}
    with tempfile.NamedTemporaryFile(prefix=f"pressroom-{host.name}-", suffix=".log", delete=False) as log:
        worker = subprocess.Popen(["ip", "netns", "exec", host.name, sys.executable, "-m", "worker"], cwd=ROOT,
                                  env=env, stdout=subprocess.DEVNULL, stderr=log)
    worker.log_path = log.name  # type: ignore[attr-defined]
    return worker


@pytest.mark.crash
async def test_a_worker_cut_off_mid_send_on_its_own_host_and_the_other_finishes_every_member_once(
        db, mailgun, dev_env, newsletter_settings):
    settings = newsletter_settings(batch_size=250)
    seeded = await seed_email(db, members=2000)  # eight batches
    mailgun.set_faults(latency_ms=1500)  # a batch stays in flight long enough to be cut off in it
    temporal_port = int(dev_env.client.service_client.config.target_host.rpartition(":")[2])
    pg_port, sim_port = urlsplit(settings.database_url).port, urlsplit(mailgun.base_url).port
    assert pg_port and sim_port
    tag, subnet = uuid.uuid4().hex[:5], random.randrange(0, 250)
    first, second = Host(f"pra{tag}", subnet), Host(f"prb{tag}", subnet + 1)
    workers: list[subprocess.Popen] = []
    try:
        first.make()
        second.make()
        async with forwarding(first.address, [temporal_port, pg_port, sim_port]), \
                forwarding(second.address, [temporal_port, pg_port, sim_port]):
            workers.append(spawn_on(first, settings, temporal_port, pg_port, sim_port))
            await start_newsletter(seeded.email_id, client=dev_env.client, settings=settings)

            async def in_flight() -> bool:  # the first host holds the send, one batch sent and more going
                states = {r["status"] for r in await db.fetch(
                    "SELECT status FROM email_batches WHERE email_id = $1", seeded.email_id)}
                return {"submitted", "submitting"} <= states
            await wait_until(in_flight, 120, workers[0])
            workers.append(spawn_on(second, settings, temporal_port, pg_port, sim_port))
            first.cut()
            left = await db.fetchval("SELECT count(*) FROM email_batches WHERE email_id = $1 AND status <> 'submitted'",
                                     seeded.email_id)

            async def sent() -> bool:
                return await db.fetchval("SELECT status FROM emails WHERE id = $1", seeded.email_id) == "submitted"
            await wait_until(sent, 240, workers[1])
            assert workers[0].poll() is None, "the first worker was cut off, not stopped"
            assert left >= 2, "the second host sent the batches the first one held and those after them"
    finally:
        for worker in workers:
            with contextlib.suppress(ProcessLookupError):
                worker.send_signal(signal.SIGKILL)
            worker.wait(30)
        first.remove()
        second.remove()

    members = {r["email"] for r in await db.fetch(
        "SELECT m.email FROM members m JOIN members_newsletters mn ON mn.member_id = m.id "
        "WHERE mn.newsletter_id = $1", seeded.newsletter_id)}
    assert delivered(mailgun, seeded.email_id) == dict.fromkeys(members, 1), worker_log(workers[-1])

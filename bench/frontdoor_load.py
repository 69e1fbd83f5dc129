"""`GET /healthz` while the front door is attacked cheaply, beside the same probes on a quiet door.

`pressroom serve` runs as its own process against a fresh PostgreSQL. First `--seconds` of
sequential health probes alone; then the same probes while, at once: `--sign-ins` clients sign in
over and over (each an Argon2 check, or a 429 past the checks at once), a crowd of `--crowd` idle
connections from nine loopback addresses (each reopened as soon as the server drops it), and
`--uploads` clients each sending a chunked body past the sign-in's 4 KiB limit. Prints each phase's
p50 and p99, the loaded p99 over the quiet one, and what the attackers were answered.

    .venv/bin/python bench/frontdoor_load.py [--seconds 20] [--sign-ins 10] [--crowd 1000] [--uploads 16]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp
from argon2 import PasswordHasher

from bench.processes import stop_server
from bench.unsubscribe import percentile, wait_for_port
from devstack.servers import Postgres, free_port
from pressroom import database

EDITOR, PASSWORD = "editor@example.com", "a bench password, long enough"
CROWD_ADDRESSES = [f"127.0.0.{n}" for n in range(11, 20)]  # nine addresses, as the attack


async def probes(base: str, seconds: float) -> list[float]:
    """Sequential GET /healthz for `seconds`: each one's latency."""
    latencies = []
    async with aiohttp.ClientSession() as http:
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            began = time.perf_counter()
            async with http.get(f"{base}/healthz") as answer:
                await answer.read()
                assert answer.status == 200, answer.status
            latencies.append(time.perf_counter() - began)
    return latencies


async def sign_ins(base: str, stop: float, answered: Counter) -> None:
    """One editor signing in again and again (the right password: every try is a hash checked)."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        while time.monotonic() < stop:
            async with http.get(f"{base}/pressroom/sign-in") as page:
                csrf = re.search(r'name="csrf" value="([^"]+)"', await page.text()).group(1)
            async with http.post(f"{base}/pressroom/sign-in", allow_redirects=False,
                                 data={"csrf": csrf, "email": EDITOR, "password": PASSWORD}) as answer:
                await answer.read()
                answered[f"sign-in {answer.status}"] += 1
                if answer.status == 429:
                    await asyncio.sleep(0.05)


async def crowd(port: int, size: int, stop: float, answered: Counter) -> None:
    """`size` idle connections from nine addresses, each reopened when the server drops it."""
    async def hold(address: str) -> None:
        while time.monotonic() < stop:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(address, 0))
            except OSError:
                await asyncio.sleep(0.1)
                continue
            answered["crowd connections"] += 1
            with contextlib.suppress(TimeoutError, OSError):
                await asyncio.wait_for(reader.read(), max(0.1, stop - time.monotonic()))
            writer.close()
    await asyncio.gather(*(hold(CROWD_ADDRESSES[n % len(CROWD_ADDRESSES)]) for n in range(size)))


async def uploads(port: int, stop: float, answered: Counter) -> None:
    """A chunked body past the sign-in's limit, never ended, again and again."""
    chunk = b"a" * 4096
    while time.monotonic() < stop:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /pressroom/sign-in HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                     b"Content-Type: application/x-www-form-urlencoded\r\n\r\n")
        with contextlib.suppress(OSError):
            for _ in range(64):  # 256 KiB offered
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
        try:
            head = await asyncio.wait_for(reader.read(12), 30)
            answered[f"upload {head[9:12].decode() or 'dropped'}"] += 1
        except (TimeoutError, OSError):
            answered["upload dropped"] += 1
        writer.close()


def line(name: str, latencies: list[float]) -> float:
    p99 = percentile(latencies, 0.99)
    print(f"  {name:<34} {len(latencies):6,} probes   p50 {statistics.median(latencies) * 1000:8.2f} ms"
          f"   p99 {p99 * 1000:8.2f} ms", flush=True)
    return p99


async def main(seconds: float, signers: int, crowd_size: int, uploaders: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="pressroom-bench-frontdoor-"))
    postgres = Postgres(folder / "postgres", free_port())
    postgres.start(durable=False)
    server = None
    try:
        await database.migrate(postgres.url)
        pool = await database.connect(postgres.url, max_size=2)
        await pool.execute("INSERT INTO staff (id, email, password_hash) VALUES ('staff-bench', $1, $2)", EDITOR,
                           PasswordHasher().hash(PASSWORD))
        await pool.close()
        port = free_port()
        log = folder / "serve.log"
        env = {**os.environ, "DATABASE_URL": postgres.url, "PRESSROOM_MEMBERS_LINK_SECRET": "bench-link-secret",
               "MAILGUN_WEBHOOK_SIGNING_KEY": "bench-signing-key", "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
               "PRESSROOM_METRICS_PORT": "0"}
        with open(log, "ab") as out:
            server = subprocess.Popen([sys.executable, "-m", "starter", "serve", "--port", str(port)], cwd=ROOT,
                                      env=env, stdout=out, stderr=subprocess.STDOUT)
        wait_for_port(port, server, log)
        base = f"http://127.0.0.1:{port}"
        load = os.getloadavg()[0]
        print(f"pressroom serve pid {server.pid}; load {load:.1f}; {seconds:g} s a phase; {signers} signing in, "
              f"{crowd_size:,} idle connections from {len(CROWD_ADDRESSES)} addresses, {uploaders} chunked uploads",
              flush=True)
        await probes(base, 1.0)  # warm: the pool's connections, the statements prepared
        quiet = line("GET /healthz, quiet", await probes(base, seconds))

        # The attackers run as a process of their own: in this one, their coroutines would delay the
        # probes' own event loop and the figure would measure the bench.
        attack = subprocess.Popen([sys.executable, __file__, "--attack", str(port), "--seconds", str(seconds + 2),
                                   "--sign-ins", str(signers), "--crowd", str(crowd_size),
                                   "--uploads", str(uploaders)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        await asyncio.sleep(2)  # the crowd gathered, the sign-ins under way
        loaded = line("GET /healthz, attacked", await probes(base, seconds))
        said, _ = await asyncio.to_thread(attack.communicate)
        print(f"  p99 attacked / quiet: {loaded / quiet:.2f}x", flush=True)
        print(f"  the attackers were answered: {said.strip()}", flush=True)
    finally:
        stop_server(server)
        postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)


async def attack(port: int, seconds: float, signers: int, crowd_size: int, uploaders: int) -> None:
    answered: Counter[str] = Counter()
    stop, base = time.monotonic() + seconds, f"http://127.0.0.1:{port}"
    await asyncio.gather(*(sign_ins(base, stop, answered) for _ in range(signers)),
                         crowd(port, crowd_size, stop, answered),
                         *(uploads(port, stop, answered) for _ in range(uploaders)))
    print(", ".join(f"{k} {v:,}" for k, v in sorted(answered.items())), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--sign-ins", type=int, default=10)
    parser.add_argument("--crowd", type=int, default=1000)
    parser.add_argument("--uploads", type=int, default=16)
    parser.add_argument("--attack", type=int, metavar="PORT", help=argparse.SUPPRESS)  # the attackers' process
    args = parser.parse_args()
    if args.attack:
        asyncio.run(attack(args.attack, args.seconds, args.sign_ins, args.crowd, args.uploads))
    else:
        asyncio.run(main(args.seconds, args.sign_ins, args.crowd, args.uploads))

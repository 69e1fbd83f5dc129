"""The front door tried as an attacker would, part two: a trickle of malformed requests against
`/healthz`, members' keys and uuids in the server's error lines, the unsubscribe form's action, and
one client holding the connection cap. Real sockets, real PostgreSQL; `pressroom serve` as a process
where its own logging is what is tested."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import httpx
import pytest

from devstack.servers import free_port
from pressroom import logs
from pressroom.logs import LevelByOwner, Mask, RunFormatter, ThrottledLines
from tests.conftest import TEST_LINK_SECRET
from tests.webhooks.conftest import eventually

from .conftest import close_door, link, open_door, reference_key

ROOT = Path(__file__).resolve().parents[2]
NEVER = 60.0  # bounds that keep a broken server from hanging the test; nothing is timed against them


def malformed(line_bytes: int = 8000) -> bytes:
    """A request whose 8 KB request line aiohttp refuses (400) and logs whole: no `@` in it."""
    return f"GET /{'a' * line_bytes} HTTP/1.1 junk\r\nHost: x\r\n\r\n".encode()


async def send_raw(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(200), NEVER)
    except ConnectionResetError:
        return b""
    finally:
        writer.close()


async def start_serve(settings, log_path: str) -> tuple[asyncio.subprocess.Process, int]:
    """`pressroom serve` as an operator runs it, its log (stderr) into `log_path`."""
    port = free_port()
    env = {**os.environ, "DATABASE_URL": settings.database_url, "PRESSROOM_MEMBERS_LINK_SECRET": TEST_LINK_SECRET,
           "MAILGUN_WEBHOOK_SIGNING_KEY": settings.webhook_signing_key.get_secret_value(),
           "PRESSROOM_METRICS_PORT": "0"}
    log = await asyncio.to_thread(open, log_path, "wb")
    try:
        process = await asyncio.create_subprocess_exec(sys.executable, "-m", "starter", "serve", "--port", str(port),
                                                       cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=log)
    finally:
        log.close()
    line = await asyncio.wait_for(process.stdout.readline(), NEVER)
    assert b"front door on" in line, await asyncio.to_thread(Path(log_path).read_text)
    return process, port


async def test_a_trickle_of_malformed_requests_does_not_slow_health(webhook_settings, db):
    """Before: each 8 KB line took seconds to mask on the event loop, and /healthz answered 503 or
    not at all. Now every probe is answered 200 while the trickle goes on, the server writes one
    line for the lot (not one each), and the lines it writes are short."""
    log_path = tempfile.mktemp(prefix="pressroom-trickle-", suffix=".log")
    process, port = await start_serve(webhook_settings, log_path)
    trickled, probes = 0, []
    try:
        async def trickle() -> None:
            nonlocal trickled
            for _ in range(40):  # 40 malformed 8 KB requests, one every 0.1 s, each answered 400
                answer = await send_raw(port, malformed())
                assert answer.startswith(b"HTTP/1.0 400") or answer.startswith(b"HTTP/1.1 400"), answer
                trickled += 1
                await asyncio.sleep(0.1)

        started = time.monotonic()
        trickling = asyncio.create_task(trickle())
        async with httpx.AsyncClient(timeout=NEVER) as http:
            while not trickling.done() or len(probes) < 5:
                began = time.monotonic()
                status = (await http.get(f"http://127.0.0.1:{port}/healthz")).status_code
                probes.append((status, time.monotonic() - began))
        await trickling
        # Then a burst of 500 more (short lines): still no more lines than one per kind every 10 s.
        for _ in range(10):
            await asyncio.gather(*(send_raw(port, malformed(200)) for _ in range(50)))
        elapsed = time.monotonic() - started
        async with httpx.AsyncClient(timeout=NEVER) as http:
            assert (await http.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), NEVER)
    written = await asyncio.to_thread(Path(log_path).read_text, errors="replace")
    os.unlink(log_path)
    error_lines = [line for line in written.splitlines() if "aiohttp.server" in line]
    slowest = max(took for _, took in probes)
    print(f"\n{trickled} malformed 8 KB requests and 500 short ones in {elapsed:.1f} s; {len(probes)} health probes "
          f"during the trickle, statuses {sorted({s for s, _ in probes})}, slowest {slowest * 1000:.0f} ms; "
          f"{len(error_lines)} aiohttp error lines, log {len(written.encode())} bytes")
    assert trickled == 40
    assert [status for status, _ in probes] == [200] * len(probes)
    assert 1 <= len(error_lines) <= elapsed // 10 + 2  # the first one, then one every 10 s at most
    assert "more since the last such line" in written or len(error_lines) == 1
    assert all(len(line) < logs.MAX_TEXT + 600 for line in written.splitlines())
    assert len(written.encode()) < 20_000  # before: 540 lines of over 8 KB each


def test_5000_bad_requests_write_a_few_lines():
    """aiohttp's error line for each bad request, through the filter `pressroom serve` installs."""
    logger = logging.getLogger("tests.aiohttp-like")
    logger.propagate = False
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(RunFormatter())
    logger.addHandler(handler)
    logger.addFilter(ThrottledLines(every=3600))
    try:
        for _ in range(5000):
            try:
                raise ValueError(f"Bad status line: b'GET /{'a' * 8000} HTTP/1.1 junk'")
            except ValueError as error:
                logger.exception("Error handling request from %s", "127.0.0.1", exc_info=error)
    finally:
        logger.removeHandler(handler)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and len(out.getvalue()) < logs.MAX_TEXT + 600
    assert "cut," in lines[0]


def test_masking_a_long_run_without_an_address_takes_linear_time():
    """Before: 2k/4k/8k characters took 0.23/0.86/3.58 s (quadratic); 256k would take about an hour.
    The bound below is a hang guard a thousand times the linear time, not a timing goal (those are
    in bench/log_mask.py)."""
    mask = Mask(["a-configured-secret-0123456789"])
    for text in ("a" * 256_000, ("/unsubscribe/x-y.z_" * 14_000), "%41" * 90_000, "&k=v" * 64_000):
        began = time.monotonic()
        assert mask(f"GET /{text} HTTP/1.1") == f"GET /{text} HTTP/1.1"
        assert time.monotonic() - began < 60
    assert mask("x" * 5000 + " bob@example.com") == "x" * 5000 + " <address>"
    assert mask("a%40b.example and " + "%" * 3000) == "<address> and " + "%" * 3000


@pytest.fixture
def server_log():
    """The root logger's lines as `pressroom serve` writes them (masked, one line each), every one of
    aiohttp's error lines kept (no throttle) so that each request's line is there to read."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(RunFormatter([TEST_LINK_SECRET]))
    handler.addFilter(LevelByOwner(logging.INFO, logging.WARNING))
    root = logging.getLogger()
    root.addHandler(handler)
    throttled = logs.throttle("aiohttp.server")
    every, throttled.every = throttled.every, 0.0
    try:
        yield out
    finally:
        throttled.every = every
        root.removeHandler(handler)


async def test_no_key_or_uuid_in_the_server_error_lines(webhook_settings, db, site, server_log):
    member_uuid = site.members["m1"]
    key = reference_key(member_uuid)
    running = await open_door(webhook_settings)
    try:
        the_link = link("", member_uuid, newsletter=site.newsletter_uuid)
        requests = {
            "an over-long link": f"GET {the_link}&pad={'p' * 9000} HTTP/1.1\r\nHost: x\r\n\r\n",
            "a bad request line": f"GET {the_link} HTTP/1.1 junk\r\nHost: x\r\n\r\n",
            "an over-long Referer": (f"GET /healthz HTTP/1.1\r\nHost: x\r\nReferer: https://site.example{the_link}"
                                     f"&pad={'p' * 9000}\r\n\r\n"),
        }
        for what, request in requests.items():
            before = server_log.getvalue()
            answer = await send_raw(running.port, request.encode())
            assert answer.startswith(b"HTTP/1.0 400") or answer.startswith(b"HTTP/1.1 400"), (what, answer)

            async def logged(before=before):
                return server_log.getvalue() != before
            await eventually(logged, seconds=NEVER, every=0.05)
            line = server_log.getvalue()[len(before):]
            assert "aiohttp.server" in line, (what, line)  # the request's line was written: it is what is read
            assert "/unsubscribe/" in line or "site.example" in line, (what, line)
    finally:
        await close_door(running)
    written = server_log.getvalue()
    for secret in (key, key[:24], member_uuid, member_uuid[:18], site.newsletter_uuid):
        assert secret not in written, f"{secret} in {written}"
    assert "key=***" in written and "uuid=***" in written


def test_keys_and_link_uuids_are_masked_in_every_encoding_runs_are_kept():
    mask = Mask()
    member_uuid, key = "0b4c2c9e-3f0a-4b0e-9d7e-1a2b3c4d5e6f", "ab" * 32
    the_link = f"https://site.example/unsubscribe/?uuid={member_uuid}&key={key}&newsletter={member_uuid}"
    for form in (the_link, quote(the_link, safe=""), quote(quote(the_link, safe=""), safe=""),
                 f"https://x.example/r/abc?m={member_uuid}", f"digest {key.upper()} seen", the_link[:90]):
        masked = mask(form)
        assert member_uuid not in masked.lower() and key not in masked.lower(), masked
        assert key[:20] not in masked.lower(), masked
    # A run's id and a workflow id are an operator's handles: kept.
    line = f"locked email e1 workflow_id=newsletter-e1 run_id={member_uuid}"
    assert mask(line) == line


async def test_the_page_form_posts_to_the_link_it_shows(webhook_settings, db, site, front_door):
    """A `%23` in a parameter decoded into `#` would end the form's action there: the POST would
    then leave every newsletter while the page named one."""
    member_uuid = site.members["m2"]
    key = reference_key(member_uuid)
    for email in ("a%23b", "a&b", "a+b", "été", "e1#x"):
        url = (f"{front_door.base}/unsubscribe/?uuid={member_uuid}&key={key}&email={quote(email, safe='')}"
               f"&newsletter={site.newsletter_uuid}")
        async with httpx.AsyncClient(timeout=NEVER) as http:
            page = await http.get(url)
        assert page.status_code == 200
        [action] = re.findall(r'<form method="post" action="([^"]*)"', page.text)
        target = urlsplit(action.replace("&amp;", "&"))
        assert target.fragment == "" and "#" not in action
        query = parse_qs(target.query)
        assert query["uuid"] == [member_uuid] and query["key"] == [key]
        assert query["newsletter"] == [site.newsletter_uuid]
    # Pressing the page's one-newsletter button leaves that newsletter only.
    async with httpx.AsyncClient(timeout=NEVER) as http:
        url = f"{front_door.base}/unsubscribe/?uuid={member_uuid}&key={key}&email={quote('x#y', safe='')}" \
              f"&newsletter={site.newsletter_uuid}"
        page = await http.get(url)
        [action] = re.findall(r'<form method="post" action="([^"]*)"', page.text)
        left = await http.post(f"{front_door.base}{action.replace('&amp;', '&')}", data={"scope": "newsletter"})
    assert left.status_code == 200
    kept = await db.fetch("SELECT n.uuid FROM members_newsletters mn JOIN newsletters n ON n.id = mn.newsletter_id "
                          "JOIN members m ON m.id = mn.member_id WHERE m.uuid = $1", member_uuid)
    assert [str(r["uuid"]) for r in kept] == [site.other_newsletter_uuid]


async def test_one_client_over_its_share_of_connections_does_not_stop_another(webhook_settings, db):
    """Before: one address could hold the whole cap (reopening faster than the head deadline drops
    them). Now it holds its share; another address is served; a proxy's address is not capped."""
    running = await open_door(webhook_settings, serve_max_connections=50, serve_max_connections_per_client=10,
                              serve_header_timeout_seconds=60)
    held = []
    try:
        for _ in range(10):
            held.append(await asyncio.open_connection("127.0.0.1", running.port, local_addr=("127.0.0.1", 0)))

        async def all_held():
            return running.door.connections.by_client["127.0.0.1"] == 10
        assert await eventually(all_held, seconds=NEVER, every=0.05)
        for _ in range(5):  # the same client again: closed at once, whatever it sends
            reader, writer = await asyncio.open_connection("127.0.0.1", running.port, local_addr=("127.0.0.1", 0))
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert await asyncio.wait_for(reader.read(), NEVER) == b""
            writer.close()
        assert running.door.connections.refused_over_client_cap == 5
        # Another client address (all of 127.0.0.0/8 is this machine): served.
        answer = await send_raw_from("127.0.0.2", running.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200"), answer
    finally:
        for _, writer in held:
            writer.close()
        await close_door(running)
    # The operator's proxy carries many clients: counted toward the total only.
    running = await open_door(webhook_settings, serve_max_connections=50, serve_max_connections_per_client=10,
                              serve_header_timeout_seconds=60, serve_proxies="127.0.0.1")
    held = []
    try:
        for _ in range(20):
            held.append(await asyncio.open_connection("127.0.0.1", running.port))
        answer = await send_raw_from("127.0.0.1", running.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200"), answer
        assert running.door.connections.refused_over_client_cap == 0
    finally:
        for _, writer in held:
            writer.close()
        await close_door(running)


async def send_raw_from(address: str, port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(address, 0))
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(200), NEVER)
    finally:
        writer.close()


@pytest.mark.parametrize("provider, title", [("mailgun", "Mailgun"), ("ses", "Amazon SES")])
def test_the_receivers_503_line_names_its_provider_and_is_throttled(webhook_settings, monkeypatch, provider, title):
    """Before: "webhook not stored (503, Mailgun retries)" under SES too, and one line per request."""
    from frontdoor.receiver import Receiver

    monkeypatch.setenv("PRESSROOM_SES_TOPIC_ARN", "arn:aws:sns:eu-west-1:123456789012:pressroom")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    receiver = Receiver(None, webhook_settings.model_copy(update={"email_provider": provider}))  # type: ignore[arg-type]
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(RunFormatter())
    logger = logging.getLogger("pressroom.webhooks")
    logger.addHandler(handler)
    try:
        for _ in range(1000):
            receiver._cannot_store(ConnectionRefusedError("database down"))
    finally:
        logger.removeHandler(handler)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and f"(503, {title} retries): ConnectionRefusedError" in lines[0]

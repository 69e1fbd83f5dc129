"""The front door tried as an attacker would: reused envelopes, half-sent requests, a crowd of idle
connections, plain-http webhook URLs, blank keys. Real sockets, real PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
import time

import httpx
import pytest

from frontdoor.deadlines import Connections, client_group
from operations.webhooks import webhook_url
from pressroom.errors import BadInput
from pressroom.logs import RunFormatter
from pressroom.providers.mailgun import MailgunPush
from pressroom.settings import ConfigurationError, load_settings
from tests.webhooks.conftest import delivered, eventually, post, signed

from .conftest import close_door, open_door
from .test_attacks import send_raw_from

# Generous bounds so that a test never hangs; the deadlines under test are one second.
NEVER = 30.0


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """What the server sent before it closed the connection (b"" when it just dropped it)."""
    received = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), NEVER):
            received += chunk
    except ConnectionResetError:
        pass
    return received


async def test_a_reused_envelope_is_refused_whatever_its_first_event_was(db, front_door, mailgun):
    key = mailgun.webhook_signing_key
    url = f"{front_door.base}{MailgunPush.path}"
    stamp, token = int(time.time()), "t" * 50
    # The first event with this envelope is unusable (set aside, 406): the token is spent all the same.
    assert await post(url, signed(delivered(1, recipient="member1\x00@example.com"), key, timestamp=stamp,
                                  token=token)) == 406
    forged_complaint = signed(delivered(1, kind="complained"), key, timestamp=stamp, token=token)
    assert await post(url, forged_complaint) == 406
    good = signed(delivered(2), key)
    assert await post(url, good) == 200
    assert await post(url, {**good, "event-data": delivered(2, kind="complained")}) == 406
    assert await db.fetchval("SELECT count(*) FROM webhook_inbox") == 1
    assert await db.fetchval("SELECT count(*) FROM delivery_events_rejected") == 1
    await front_door.door.flush_refusals()
    counts = {r["reason"]: r["count"] for r in await db.fetch(
        "SELECT reason, count FROM webhook_refusals WHERE provider = 'mailgun'")}
    assert counts == {"event unusable": 1, "token replayed": 2}


async def test_a_retry_carrying_its_first_signature_is_taken_within_the_retry_window(db, front_door, mailgun):
    """Mailgun retries an event answered 503 for 8 hours, and does not say it signs the retry anew."""
    key, url = mailgun.webhook_signing_key, f"{front_door.base}{MailgunPush.path}"
    assert await post(url, signed(delivered(1), key, timestamp=int(time.time()) - 4 * 3600)) == 200
    assert await post(url, signed(delivered(2), key, timestamp=int(time.time()) - 10 * 3600)) == 406
    assert await post(url, signed(delivered(3), key, timestamp=int(time.time()) + 3600)) == 406
    expires = await db.fetchval("SELECT min(expires_at) - now() FROM webhook_tokens")
    assert expires.total_seconds() > 4 * 3600  # a replay of the retried one stays refused


async def test_half_sent_heads_idle_connections_and_slow_bodies_are_dropped(db, front_door, mailgun):
    host, port = "127.0.0.1", front_door.port
    half_head = await asyncio.open_connection(host, port)
    half_head[1].write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: 1")  # no end of the head
    idle = await asyncio.open_connection(host, port)  # sends nothing at all
    slow_body = await asyncio.open_connection(host, port)
    slow_body[1].write(f"POST {MailgunPush.path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       f"Content-Length: 1000\r\n\r\n{{\"signature\":".encode())
    kept_alive = await asyncio.open_connection(host, port)  # one request answered, then silence
    kept_alive[1].write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    for _, writer in (half_head, idle, slow_body, kept_alive):
        await writer.drain()

    assert await closed_by_server(half_head[0]) == b""
    assert await closed_by_server(idle[0]) == b""
    assert await closed_by_server(slow_body[0]) == b""
    answered = await closed_by_server(kept_alive[0])
    assert answered.startswith(b"HTTP/1.1 200") and b"\r\n\r\nok" in answered  # "ok", then Temporal named when absent
    for _, writer in (half_head, idle, slow_body, kept_alive):
        writer.close()

    async def all_closed():
        return not front_door.door.connections.open
    deadline = time.monotonic() + NEVER
    while not await all_closed() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert await all_closed()
    # The half-sent head and the silent connection are the guard's to drop; the kept-alive one is
    # closed at the same deadline by the guard or by aiohttp's keep-alive timeout, whichever fires
    # first on a busy machine (it was closed above either way).
    assert front_door.door.connections.dropped_slow >= 2
    await front_door.door.flush_refusals()
    assert await db.fetchval("SELECT count FROM webhook_refusals WHERE reason = 'body too slow'") == 1
    async with httpx.AsyncClient() as http:  # and it still serves
        assert (await http.get(f"{front_door.base}/healthz")).status_code == 200


async def test_at_the_cap_an_idle_connection_makes_room_and_only_busy_ones_refuse_a_new_one(webhook_settings, db):
    """Nine addresses holding idle connections took every route to errors for everyone. Now, at the
    cap, an idle connection of the client holding the most goes to make room for a new one; a new
    connection is refused only when every connection is busy with a request."""
    running = await open_door(webhook_settings, serve_max_connections=20, serve_header_timeout_seconds=60,
                              serve_body_timeout_seconds=60)
    guard = running.door.connections
    opened = []

    async def held(count: int, busy: bool) -> bool:
        return len(guard.open) == count and all((c.idle_since is None) is busy for c in guard.open.values())
    try:
        for n in range(20):  # a crowd from two addresses, idle, most from the first
            opened.append(await asyncio.open_connection("127.0.0.1", running.port,
                                                        local_addr=("127.0.0.2" if n < 15 else "127.0.0.3", 0)))
        assert await eventually(lambda: held(20, busy=False), seconds=NEVER, every=0.05)
        answer = await send_raw_from("127.0.0.4", running.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200"), answer
        assert guard.dropped_idle == 1 and guard.refused_over_cap == 0
        assert guard.by_client["127.0.0.3"] == 5  # the room came from the client holding the most
        for _, writer in opened:
            writer.close()
        opened.clear()
        assert await eventually(lambda: held(0, busy=True), seconds=NEVER, every=0.05)

        for _ in range(20):  # every connection busy: a body on its way
            reader, writer = await asyncio.open_connection("127.0.0.1", running.port, local_addr=("127.0.0.2", 0))
            writer.write(f"POST {MailgunPush.path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         "Content-Length: 1000\r\n\r\n{".encode())
            opened.append((reader, writer))
        assert await eventually(lambda: held(20, busy=True), seconds=NEVER, every=0.05)
        reader, writer = await asyncio.open_connection("127.0.0.1", running.port, local_addr=("127.0.0.4", 0))
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert await closed_by_server(reader) == b""
        writer.close()
        assert guard.refused_over_cap == 1 and guard.dropped_idle == 1
    finally:
        for _, writer in opened:
            writer.close()
        await close_door(running)


def test_a_clients_connections_are_counted_by_address_and_an_ipv6_one_by_its_64():
    guard = Connections(head_seconds=10, max_open=100, max_per_client=2)
    for address in ("2001:db8::1", "2001:db8::ffff:2"):
        assert guard.admit(client_group(address))
    assert not guard.admit(client_group("2001:db8::3"))  # the same /64: the same client
    assert guard.admit(client_group("2001:db8:0:1::1"))
    assert client_group("::ffff:192.0.2.1") == client_group("192.0.2.1") == "192.0.2.1"


def test_webhook_urls_are_https_or_this_machine():
    assert webhook_url(f"https://hooks.example.com{MailgunPush.path}")
    for local in (f"http://127.0.0.1:8090{MailgunPush.path}", f"http://localhost:8090{MailgunPush.path}", f"http://[::1]:8090{MailgunPush.path}"):
        assert webhook_url(local) == local
    for refused in (f"http://hooks.example.com{MailgunPush.path}", f"http://10.0.0.5{MailgunPush.path}", f"ftp://hooks.example.com{MailgunPush.path}",
                    f"https://user:pw@hooks.example.com{MailgunPush.path}"):
        with pytest.raises(BadInput):
            webhook_url(refused)


@pytest.mark.parametrize("variable, field", [("MAILGUN_WEBHOOK_SIGNING_KEY", "webhook_signing_key"),
                                             ("PRESSROOM_MEMBERS_LINK_SECRET", "members_link_secret")])
def test_blank_keys_refuse_to_start_and_both_secrets_are_masked(variable, field):
    for blank in ("   ", "\t", " key-with-spaces-around "):
        with pytest.raises(ConfigurationError, match=variable):
            load_settings(**{field: blank})
    settings = load_settings(webhook_signing_key="whsec-0123456789abcdef", members_link_secret="members-0123456789")
    line = RunFormatter(settings.secret_values()).format(logging.LogRecord(
        "pressroom", logging.WARNING, __file__, 1, "keys %s and %s", ("whsec-0123456789abcdef", "members-0123456789"),
        None))
    assert "0123456789" not in line and line.count("***") == 2


def test_a_suppression_removal_span_carries_no_address():
    from pressroom.providers.mailgun.client import _span_path

    assert _span_path("/v3/mg.example.com/bounces/ann@example.com") == "/v3/mg.example.com/bounces/{address}"
    assert _span_path("/v3/mg.example.com/unsubscribes/ann%40example.com") == \
        "/v3/mg.example.com/unsubscribes/{address}"
    assert _span_path("/v3/mg.example.com/messages") == "/v3/mg.example.com/messages"

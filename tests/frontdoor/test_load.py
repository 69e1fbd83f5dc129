"""The front door under load an attacker makes cheaply: chunked bodies past a route's limit, heads
past aiohttp's, crowds of idle connections from many addresses. Real sockets, real PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from pressroom.providers.mailgun import MailgunPush

from .test_hardening import closed_by_server

SIGN_IN_PATH = "/pressroom/sign-in"


async def chunked_past(port: int, path: str, limit: int) -> bytes:
    """POST `path` a chunked body 16 KiB past `limit`, never ended; what the server answered before closing."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n".encode())
    chunk = b"a" * 4096
    for _ in range((limit + 16 * 1024) // len(chunk)):
        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    await writer.drain()  # and no last chunk: a server that reads to the end waits for it
    try:
        return await closed_by_server(reader)
    finally:
        writer.close()


@pytest.mark.parametrize("route", ["sign-in", "mailgun"])
async def test_a_chunked_body_past_the_routes_limit_is_refused_without_reading_on(db, front_door, mailgun, route):
    if route == "sign-in":
        path, limit, status = SIGN_IN_PATH, 4096, b"413"
    else:  # Mailgun's "rejected, do not retry"
        path, limit, status = MailgunPush.path, front_door.door.receiver.max_body, b"406"
    # Answered as soon as the limit is passed (not dropped at the body's deadline after reading on),
    # then closed: the rest of the body is neither buffered nor drained.
    answered = await chunked_past(front_door.port, path, limit)
    assert answered.startswith(b"HTTP/1.1 " + status), answered[:100]

"""The front door under load an attacker makes cheaply: chunked bodies past a route's limit, heads
past aiohttp's, crowds of idle connections from many addresses. Real sockets, real PostgreSQL."""

from __future__ import annotations

import asyncio
import re

import pytest

from frontdoor.admin_api import MAX_BODY_BYTES as ADMIN_MAX_BODY
from frontdoor.server import MAX_FORM_BYTES
from operations.integrations import add_integration
from pressroom.providers.mailgun import MailgunPush
from tests.admin_api.conftest import token

from .conftest import link
from .test_hardening import closed_by_server

SIGN_IN_PATH = "/pressroom/sign-in"


async def chunked_past(port: int, path: str, limit: int, headers: str = "") -> bytes:
    """POST `path` a chunked body 16 KiB past `limit`, never ended; what the server answered before closing."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                 f"{headers}Transfer-Encoding: chunked\r\n\r\n".encode())
    chunk = b"a" * 4096
    for _ in range((limit + 16 * 1024) // len(chunk)):
        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    await writer.drain()  # and no last chunk: a server that reads to the end waits for it
    try:
        return await closed_by_server(reader)
    finally:
        writer.close()


@pytest.mark.parametrize("route", ["sign-in", "mailgun", "unsubscribe", "admin api"])
async def test_a_chunked_body_past_the_routes_limit_is_refused_without_reading_on(db, front_door, mailgun, site,
                                                                               route):
    headers = ""
    if route == "sign-in":
        path, limit, status = SIGN_IN_PATH, 4096, b"413"
    elif route == "mailgun":  # Mailgun's "rejected, do not retry"
        path, limit, status = MailgunPush.path, front_door.door.receiver.max_body, b"406"
    elif route == "unsubscribe":  # a valid link: the body is what is refused, as every refusal, 404
        path, limit, status = link("", site.members["m1"]), MAX_FORM_BYTES, b"404"
    else:
        key = (await add_integration("Chunks", settings=front_door.settings)).admin_api_key
        path, limit, status = "/ghost/api/admin/posts/", ADMIN_MAX_BODY, b"413"
        headers = f"Authorization: Ghost {token(key)}\r\n"
    # Answered as soon as the limit is passed (not dropped at the body's deadline after reading on),
    # then closed: the rest of the body is neither buffered nor drained.
    answered = await chunked_past(front_door.port, path, limit, headers)
    assert answered.startswith(b"HTTP/1.1 " + status), answered[:100]
    if route == "unsubscribe":
        assert await db.fetchval("SELECT count(*) FROM members_newsletters WHERE member_id = 'm1'") == 2


async def test_http_1_0_with_a_chunked_body_is_refused_and_what_is_pipelined_after_it_is_not_answered(front_door):
    reader, writer = await asyncio.open_connection("127.0.0.1", front_door.port)
    writer.write(b"POST /pressroom/sign-in HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    try:
        answered = await closed_by_server(reader)
    finally:
        writer.close()
    assert answered.startswith(b"HTTP/1.0 400") or answered.startswith(b"HTTP/1.1 400"), answered[:100]
    assert len(re.findall(rb"HTTP/1\.[01] \d{3} ", answered)) == 1, answered  # the pipelined GET got nothing

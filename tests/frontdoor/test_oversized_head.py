"""A request head past aiohttp's limit: a large cookie on the site's domain carrying the editor's
session token. `pressroom serve` as an operator runs it: neither its log nor its answer holds the
token or the head's first bytes."""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
from pathlib import Path

from .test_attacks import NEVER, start_serve
from .test_hardening import closed_by_server


async def test_an_oversized_cookie_gets_a_fixed_answer_and_no_token_in_the_log(webhook_settings, db):
    token, other = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    log_path = tempfile.mktemp(prefix="pressroom-head-", suffix=".log")
    process, port = await start_serve(webhook_settings, log_path)
    try:
        answers = []
        for cookie in (f"pressroom_session={token}; analytics={'a' * 9000}",
                       f"ghost-admin-api-session={other}; pressroom_session={token}{'b' * 9000}"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET /pressroom/newsletters HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\n\r\n".encode())
            await writer.drain()
            answers.append(await closed_by_server(reader))
            writer.close()

        async def logged() -> str:
            while "aiohttp.server" not in (text := Path(log_path).read_text(errors="replace")):
                await asyncio.sleep(0.05)  # the line is written after the answer: wait for it
            return text
        written = await asyncio.wait_for(logged(), NEVER)
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), NEVER)
    written = Path(log_path).read_text(errors="replace")
    os.unlink(log_path)
    for answer in answers:
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.") and b" 400 " in head.split(b"\r\n")[0], answer[:200]
        assert body == b"400 Bad Request: the request could not be read\n"
        assert b"aiohttp" not in head and b"Python" not in head
    for secret in (token, token[:20], other, other[:20]):
        assert secret.encode() not in b"".join(answers)
        assert secret not in written, written
    assert "pressroom_session=***" in written  # the line is there, its value masked

"""A webhook target over real HTTP for the site-webhook tests: records every request as received,
and answers as the test tells it (a status, a slow answer, an answer lost after the request was
taken)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def key(self) -> str:
        return self.headers["Idempotency-Key"]

    def json(self) -> dict[str, Any]:
        return json.loads(self.body)

    def signed_with(self, secret: str) -> bool:
        """The reference platform's check, written independently: sha256=HMAC(secret, body + t), t=ms."""
        header = self.headers["X-Ghost-Signature"]
        parts = dict(part.strip().split("=", 1) for part in header.split(","))
        expected = hmac.new(secret.encode(), self.body + parts["t"].encode(), hashlib.sha256).hexdigest()
        return hmac.compare_digest(parts["sha256"], expected) and parts["t"].isdigit() and len(parts["t"]) == 13


@dataclass
class Behaviour:
    status: int = 200
    delay: float = 0.0  # seconds before answering
    lose_first: bool = False  # take each key's first request, then drop the connection unanswered
    hang: asyncio.Event | None = None  # answer only once set
    answer: bytes = b"ok"


@dataclass
class Receiver:
    """Paths are targets: /a, /b … each with its own behaviour."""
    port: int = 0
    received: list[Received] = field(default_factory=list)
    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    runner: web.AppRunner | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def at(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]

    def unique(self, path: str) -> list[Received]:
        """Requests at `path` after dropping repeats by their idempotency key (the receiver's dedup)."""
        seen: dict[str, Received] = {}
        for request in self.at(path):
            seen.setdefault(request.key, request)
        return list(seen.values())

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        behaviour = self.behaviours.setdefault(request.path, Behaviour())
        first = not any(r.key == request.headers.get("Idempotency-Key") for r in self.at(request.path))
        self.received.append(Received(request.path, dict(request.headers), body))
        if behaviour.hang is not None:
            await behaviour.hang.wait()
        if behaviour.delay:
            await asyncio.sleep(behaviour.delay)
        if behaviour.lose_first and first:
            assert request.transport is not None
            request.transport.abort()  # taken, but the answer never reaches the sender
            raise asyncio.CancelledError
        return web.Response(status=behaviour.status, body=behaviour.answer)

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/{path:.*}", self.handle)
        self.runner = web.AppRunner(app, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        for behaviour in self.behaviours.values():
            if behaviour.hang is not None:
                behaviour.hang.set()
        if self.runner is not None:
            await self.runner.cleanup()

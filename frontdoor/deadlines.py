"""What one client of the front door may hold: deadlines for a request's head and body, a cap on
open connections, and a cap on those of one client address.

aiohttp keeps none of these for a request in progress: a client that sends half its headers, or a
body at one byte every few seconds, holds a connection (and its memory) for as long as it likes.
Each connection's aiohttp protocol is wrapped here: its request head must arrive within the head
deadline of the connection opening or of the last answer (so an idle keep-alive connection goes
too), a handler reads a body under its own deadline (`read_body`); at the cap an idle connection
makes room for a new one (the oldest of the client holding the most), and when every one is busy,
or past its client's share, a new connection is closed at once.

A client is its TCP peer address (an IPv6 one by its /64): X-Forwarded-For is a header any client
writes, and a connection's cap is decided before any header arrives. The operator's proxies
(PRESSROOM_SERVE_PROXIES) carry many clients and count only toward the total; the proxy limits its
own clients (docs/front-door.md).
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import hdrs, web
from aiohttp.http import HttpVersion11

if TYPE_CHECKING:
    from aiohttp import web


def client_group(address: str) -> str:
    """The client a connection counts for: its address, or an IPv6 address's /64 (one host is given
    a whole /64 to choose from)."""
    try:
        parsed = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed)


def client_address(request: web.Request, proxies: frozenset[str]) -> str:
    """Who sent the request, for slowing sign-ins and telling scanners: its TCP peer, or, when the
    peer is one of the operator's proxies, the address that proxy put last in X-Forwarded-For (the
    entries before it are the client's own to write, so only the proxy's is believed)."""
    peer = request.remote or "unknown"
    if peer not in proxies:
        return peer
    for hop in reversed(request.headers.get("X-Forwarded-For", "").split(",")):
        try:
            address = str(ipaddress.ip_address(hop.strip()))
        except ValueError:
            return peer  # a proxy that wrote something else: the proxy is all that is known
        if address not in proxies:
            return address
    return peer


class BodyTooLarge(Exception):
    pass


class BodyTooSlow(Exception):
    pass


async def read_body(request: web.Request, max_bytes: int, seconds: float) -> bytes:
    """The request's body, at most `max_bytes`, read within `seconds`; past the deadline the
    connection is dropped (BodyTooSlow), and nothing more is read from it. A chunked body is held
    to the same limit as a declared one: reading stops at the first byte past it (BodyTooLarge); the
    server closes the connection after the answer instead of draining the rest (no lingering)."""
    if request.content_length is not None and request.content_length > max_bytes:
        raise BodyTooLarge
    body = bytearray()
    try:
        if request.content.is_eof():  # it all came with the head: nothing to wait for, no timer to arm
            body += await request.content.read()
        else:
            async with asyncio.timeout(seconds):
                while len(body) <= max_bytes and (chunk := await request.content.read(max_bytes + 1 - len(body))):
                    body += chunk
    except TimeoutError:
        if request.transport is not None:
            request.transport.abort()
        raise BodyTooSlow from None
    if len(body) > max_bytes:
        raise BodyTooLarge
    return bytes(body)


@web.middleware
async def refuse_ambiguous_framing(request: web.Request, handler):
    """HTTP/1.0 has no chunked bodies: proxies disagree on where such a body ends (and so on where a
    request pipelined after it starts), so it is refused and the connection closed."""
    if request.version < HttpVersion11 and hdrs.TRANSFER_ENCODING in request.headers:
        response = web.Response(status=400, text="Transfer-Encoding is HTTP/1.1's: send the request as HTTP/1.1\n")
        response.force_close()
        return response
    return await handler(request)


@dataclass
class Connections:
    """The open connections and what the guard did: dropped for a slow head, closed over the cap."""

    head_seconds: float
    max_open: int
    max_per_client: int | None = None  # None: no cap per client address
    proxies: frozenset[str] = frozenset()  # addresses that carry many clients: the total cap only
    open: dict[Any, _Guarded] = field(default_factory=dict)
    by_client: Counter[str] = field(default_factory=Counter)
    dropped_slow: int = 0
    dropped_idle: int = 0  # idle connections closed to make room for a new one at the cap
    refused_over_cap: int = 0
    refused_over_client_cap: int = 0

    def admit(self, client: str | None) -> bool:
        """Whether a new connection from `client` (its group: client_group) may be held; counted as
        held if so. At the cap, an idle connection goes to make room (the oldest of the client that
        holds the most): idle connections cost a crowd nothing to hold, a request in progress is
        someone's work. Only when every connection is busy is the new one refused."""
        if client is not None and client not in self.proxies and self.max_per_client is not None \
                and self.by_client[client] >= self.max_per_client:
            self.refused_over_client_cap += 1
            return False
        if len(self.open) >= self.max_open and not self._drop_an_idle_one():
            self.refused_over_cap += 1
            return False
        if client is not None:
            self.by_client[client] += 1
        return True

    def _drop_an_idle_one(self) -> bool:
        idle = [connection for connection in self.open.values() if connection.idle_since is not None]
        if not idle:
            return False
        victim = max(idle, key=lambda c: (self.by_client.get(c.client or "", 0) if c.client not in self.proxies
                                          else 0, -(c.idle_since or 0.0)))
        self.dropped_idle += 1
        victim.drop()
        return True

    def release(self, client: str | None) -> None:
        if client is not None and client in self.by_client:
            self.by_client[client] -= 1
            if self.by_client[client] <= 0:
                del self.by_client[client]

    def protocol_factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: _Guarded(self, inner())

    def middleware(self):
        """Marks a request handled (no head deadline while its handler runs) and waiting again after."""

        @web.middleware
        async def guarded(request: web.Request, handler):
            connection = self.open.get(request.transport)
            if connection is not None:
                connection.handling()
            try:
                return await handler(request)
            finally:
                if connection is not None:
                    connection.wait_for_head()
        return guarded


class _Guarded(asyncio.Protocol):
    """One connection: aiohttp's protocol inside, the head deadline and the cap around it."""

    def __init__(self, connections: Connections, inner: Any) -> None:
        self.connections, self.inner = connections, inner
        self.transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._started = False
        self.client: str | None = None
        self.idle_since: float | None = None  # waiting for a request's head since then (None: busy)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        client = client_group(peer[0]) if isinstance(peer, tuple) and peer else None
        if not self.connections.admit(client):
            transport.abort()  # type: ignore[attr-defined]
            return
        self.client = client
        self.connections.open[transport] = self
        self._started = True
        self.inner.connection_made(transport)
        self.wait_for_head()

    def wait_for_head(self) -> None:
        self._cancel()
        if self.transport is not None and not self.transport.is_closing():
            self.idle_since = time.monotonic()
            self._timer = asyncio.get_running_loop().call_later(self.connections.head_seconds, self._too_slow)

    def handling(self) -> None:
        self._cancel()
        self.idle_since = None

    def drop(self) -> None:
        """Closed to make room: out of the counts now (its connection_lost comes later)."""
        self._cancel()
        self.connections.open.pop(self.transport, None)
        if self._started:
            self._started = False
            self.connections.release(self.client)
            self.inner.connection_lost(None)
        if self.transport is not None:
            self.transport.abort()

    def _too_slow(self) -> None:
        self._timer = None
        self.connections.dropped_slow += 1
        if self.transport is not None:
            self.transport.abort()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def data_received(self, data: bytes) -> None:
        if self._started:
            self.idle_since = None  # a request is coming: no longer a connection to drop for room
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        self.connections.open.pop(self.transport, None)
        if self._started:
            self._started = False
            self.connections.release(self.client)
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

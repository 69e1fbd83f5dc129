"""Readers and mail scanners following the tracked links of delivered copies, for the simulators.

A delivered copy's reader may follow one of its links (a browser, some seconds after delivery;
now and then twice), and a mail security gateway may fetch every link of it at once, on delivery,
before the reader ever sees it (half of them say who they are in their user agent, half pass for a browser).
Who does what is a hash of the copy, so the same send gives the same clicks. Only Pressroom's
tracked links (`…/r/…`) are followed, never their targets: nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import hashlib
import html as html_lib
import re
import struct
from collections import Counter
from dataclasses import dataclass, fields
from typing import Any

import aiohttp

BROWSER = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
SCANNER = "Mozilla/5.0 (compatible; Mimecast URL Protect)"
_HREF = re.compile(r"""href\s*=\s*["']([^"']+)["']""", re.I)
_TRACKED = re.compile(r"^https?://[^/]+/r/[A-Za-z0-9_-]+(\?|$)")


@dataclass
class Following:
    """Shares of delivered copies (0 to 1) whose links are followed, and how."""

    readers: float = 0.0  # a reader follows one link, `reader_delay_seconds` after delivery
    scanners: float = 0.0  # a scanner fetches every link at once
    reader_delay_seconds: float = 5.0  # well after a scanner's burst, which a reader's click would join
    concurrency: int = 16

    def update(self, changes: dict[str, Any]) -> None:
        known = {f.name: f for f in fields(self)}
        for name, value in changes.items():
            if name not in known:
                raise ValueError(f"unknown field {name!r}")
            value = type(getattr(self, name))(value)
            if name in ("readers", "scanners") and not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1")
            setattr(self, name, value)


def tracked_links(html: str) -> list[str]:
    """The tracked links of a copy, in order, each once."""
    seen: dict[str, None] = {}
    for match in _HREF.finditer(html):
        url = html_lib.unescape(match.group(1))
        if _TRACKED.match(url):
            seen.setdefault(url, None)
    return list(seen)


def _draws(key: str) -> tuple[float, ...]:
    digest = hashlib.blake2b(key.encode(), digest_size=16, person=b"links").digest()
    return tuple(part / 4294967296.0 for part in struct.unpack(">4I", digest))


class LinkFollowers:
    """`delivered(key, html)` for every delivered copy; the follows run in the background."""

    def __init__(self) -> None:
        self.following = Following()
        self.counts: Counter[str] = Counter()
        self._tasks: set[asyncio.Task] = set()
        self._session: aiohttp.ClientSession | None = None
        self._slots: asyncio.Semaphore | None = None

    @property
    def active(self) -> bool:
        return bool(self.following.readers or self.following.scanners)

    def delivered(self, key: str, html: str) -> None:
        if not self.active:
            return
        links = tracked_links(html)
        if not links:
            return
        reader, scanner, pick, again = _draws(key)
        if scanner < self.following.scanners:
            agent = SCANNER if pick < 0.5 else BROWSER
            self._background(self._follow("scanner", links, agent, 0.0))
        if reader < self.following.readers:
            link = links[int(pick * len(links))]
            self._background(self._follow("reader", [link] * (2 if again < 0.25 else 1), BROWSER,
                                          self.following.reader_delay_seconds))

    def _background(self, work) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _follow(self, who: str, links: list[str], agent: str, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
            self._slots = asyncio.Semaphore(self.following.concurrency)
        assert self._slots is not None
        self.counts[who] += 1
        if who == "scanner":  # every link at once, as a gateway fetches them
            await asyncio.gather(*(self._get(link, agent) for link in links))
        else:
            for link in links:
                await self._get(link, agent)

    async def _get(self, link: str, agent: str) -> None:
        assert self._session is not None and self._slots is not None
        async with self._slots:
            try:
                async with self._session.get(link, allow_redirects=False, headers={"User-Agent": agent}) as response:
                    self.counts[f"answered_{response.status}"] += 1
            except (TimeoutError, aiohttp.ClientError):
                self.counts["unreachable"] += 1

    def stats(self) -> dict[str, Any]:
        return {**{f.name: getattr(self.following, f.name) for f in fields(self.following)},
                "counts": dict(self.counts), "pending": len(self._tasks)}

    async def settle(self) -> None:
        """Every follow begun so far finished (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

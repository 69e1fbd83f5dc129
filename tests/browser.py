"""A headless Chromium driven over the DevTools protocol: open a page, wait for text, read it.

The Temporal Web UI is a single-page app that keeps polling, so "wait until the page shows X"
is the only honest way to read it; Chromium comes from Debian's `chromium` package.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

from devstack.servers import free_port


class Page:
    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self._socket = socket
        self._ids = itertools.count(1)

    async def _call(self, method: str, **params) -> dict:
        call_id = next(self._ids)
        await self._socket.send_json({"id": call_id, "method": method, "params": params})
        async for message in self._socket:
            reply = json.loads(message.data)
            if reply.get("id") == call_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
        raise RuntimeError("the browser closed the connection")

    async def goto(self, url: str) -> None:
        await self._call("Page.navigate", url=url)

    async def text(self) -> str:
        result = await self._call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''",
                                  returnByValue=True)
        return result.get("result", {}).get("value") or ""

    async def click(self, selector: str) -> None:
        """Click the first element `selector` finds (a form's button submits its form)."""
        await self._call("Runtime.evaluate", expression=f"document.querySelector({json.dumps(selector)}).click()")

    async def wait_for_text(self, *wanted: str, timeout: float = 30) -> str:
        """The page's text once it contains every string wanted; the last text seen in the error."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = await self.text()
            if all(part in text for part in wanted):
                return text
            await asyncio.sleep(0.25)
        raise AssertionError(f"the page never showed {wanted!r}; it showed: {text[:2000]!r}")


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@asynccontextmanager
async def headless_page() -> AsyncIterator[Page]:
    binary = chromium_path()
    if binary is None:
        raise RuntimeError("Chromium is not installed (apt-get install chromium)")
    port = free_port()
    profile = tempfile.mkdtemp(prefix="pressroom-chromium-")
    process = subprocess.Popen(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         f"--remote-debugging-port={port}", f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "DBUS_SESSION_BUS_ADDRESS": ""})
    try:
        async with aiohttp.ClientSession() as session:
            target = None
            for _ in range(100):
                try:
                    async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
                        target = next((t for t in await response.json() if t.get("type") == "page"), None)
                    if target:
                        break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            if target is None:
                raise RuntimeError("Chromium did not open its debugging port")
            async with session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as socket:
                yield Page(socket)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(profile, ignore_errors=True)

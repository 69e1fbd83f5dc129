"""A headless Chromium driven by Playwright: Debian's `chromium` package, never a downloaded browser.

Playwright's locators and `expect` wait for a condition (text shown, a URL reached) instead of
sleeping, which is what a busy machine needs. Without Chromium a browser test is skipped, unless
PRESSROOM_REQUIRE_BROWSER is set (CI sets it), when it fails instead.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from playwright.async_api import Page, async_playwright, expect

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def skip_without_chromium() -> None:
    """At a browser test module's top: skip it without Chromium, unless CI requires the browser."""
    if chromium_path() is None and not os.environ.get("PRESSROOM_REQUIRE_BROWSER"):
        pytest.skip("Chromium is not installed (apt-get install chromium); CI installs it and runs this test",
                    allow_module_level=True)


@asynccontextmanager
async def headless_page(**context: Any) -> AsyncIterator[Page]:
    """A page of a fresh browser context (no cookies), closed with its browser at the end."""
    binary = chromium_path()
    if binary is None:
        raise RuntimeError("Chromium is not installed (apt-get install chromium)")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=binary, args=FLAGS, headless=True,
                                                   env={**os.environ, "DBUS_SESSION_BUS_ADDRESS": ""})
        try:
            page = await (await browser.new_context(**context)).new_page()
            page.set_default_timeout(30_000)
            yield page
        finally:
            await browser.close()


async def wait_for_text(page: Page, *wanted: str, seconds: float = 30) -> str:
    """The page's text once it contains every string wanted (Playwright's error shows what it saw)."""
    for part in wanted:
        await expect(page.locator("body")).to_contain_text(part, timeout=seconds * 1000)
    return await page.locator("body").inner_text()

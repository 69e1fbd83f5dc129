"""A member in a browser: the unsubscribe page opened (nothing changes), then its button pressed."""

from __future__ import annotations

import os

import pytest

from tests.browser import chromium_path, headless_page

from .conftest import link

if chromium_path() is None and not os.environ.get("PRESSROOM_REQUIRE_BROWSER"):
    pytest.skip("Chromium is not installed (apt-get install chromium); CI installs it and runs this test",
                allow_module_level=True)


async def test_a_member_opens_the_page_and_presses_the_button(db, site, front_door):
    url = link(front_door.base, site.members["m1"], newsletter=site.newsletter_uuid, email="e0")
    subscribed = "SELECT count(*) FROM members_newsletters WHERE member_id = 'm1'"
    async with headless_page() as page:
        await page.goto(url)
        shown = await page.wait_for_text("Unsubscribe from Weekly", "all newsletters")
        assert "m•••@e•••.com" in shown and "member1@example.com" not in shown
        assert await db.fetchval(subscribed) == 2  # opening the page changed nothing
        await page.click('button[value="newsletter"]')
        await page.wait_for_text("will not receive Weekly")
    assert await db.fetchval(subscribed) == 1
    assert await db.fetchval("SELECT source FROM members_subscribe_events WHERE member_id = 'm1'") == "link"

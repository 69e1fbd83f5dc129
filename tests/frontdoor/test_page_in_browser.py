"""A member in a browser: the unsubscribe page opened (nothing changes), then its button pressed."""

from __future__ import annotations

from tests.browser import headless_page, skip_without_chromium, wait_for_text

from .conftest import link

skip_without_chromium()


async def test_a_member_opens_the_page_and_presses_the_button(db, site, front_door):
    url = link(front_door.base, site.members["m1"], newsletter=site.newsletter_uuid, email="e0")
    subscribed = "SELECT count(*) FROM members_newsletters WHERE member_id = 'm1'"
    async with headless_page() as page:
        await page.goto(url)
        shown = await wait_for_text(page, "Unsubscribe from Weekly", "all newsletters")
        assert "m•••@e•••.com" in shown and "member1@example.com" not in shown
        assert await db.fetchval(subscribed) == 2  # opening the page changed nothing
        await page.click('button[value="newsletter"]')
        await wait_for_text(page, "will not receive Weekly")
    assert await db.fetchval(subscribed) == 1
    assert await db.fetchval("SELECT source FROM members_subscribe_events WHERE member_id = 'm1'") == "link"

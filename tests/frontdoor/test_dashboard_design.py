"""An editor in a browser reads each newsletter's design on the newsletters page, and an email's size
per segment on its report, with Gmail's clip warning when a segment is past 102 KB (as `newsletter
preview` says both)."""

from __future__ import annotations

from playwright.async_api import expect

from operations.authoring import edit_newsletter
from operations.staff import add_staff
from tests.browser import headless_page, skip_without_chromium
from tests.frontdoor.test_dashboard import EDITOR, PASSWORD, sign_in

skip_without_chromium()


async def test_the_newsletters_design_and_an_emails_size_per_segment_are_shown(db, front_door):
    settings = front_door.settings
    await add_staff(EDITOR, PASSWORD, settings=settings)
    newsletter = await db.fetchval("INSERT INTO newsletters (name, slug) VALUES ('Weekly', 'weekly') RETURNING id")
    await edit_newsletter("weekly", design={"title_alignment": "left", "background_color": "#ffeedd",
                                            "show_badge": False, "footer_content": "<p>See you <b>soon</b></p>"},
                          settings=settings)
    body = "<p>Free words.</p><!--members-only-->" + "<p>Paid words of a long read, and more of them.</p>" * 3000
    post = await db.fetchval("INSERT INTO posts (title, slug, html, status, visibility, newsletter_id) "
                             "VALUES ('Long read', 'long-read', $1, 'published', 'paid', $2) RETURNING id",
                             body, newsletter)
    email = await db.fetchval("INSERT INTO emails (post_id, newsletter_id, subject) VALUES ($1, $2, 'Long read') "
                              "RETURNING id", post, newsletter)
    async with headless_page() as page:
        await sign_in(page, front_door.base)
        await expect(page.get_by_role("heading", name="Design")).to_be_visible()
        shown = {name: await page.locator(f'[data-design="weekly:{name}"]').inner_text()
                 for name in ("title_alignment", "background_color", "show_badge", "show_byline", "footer_content",
                              "title_color")}
        assert shown == {"title_alignment": "left", "background_color": "#ffeedd", "show_badge": "no",
                         "show_byline": "yes", "footer_content": "See you soon", "title_color": "-"}, shown
        await page.get_by_role("link", name="Long read").click()
        await expect(page).to_have_url(f"{front_door.base}/pressroom/emails/{email}")
        size = await page.locator("#email-size").inner_text()
        assert "status:free" in size and "status:-free" in size and "KB" in size, size
        await expect(page.locator("#email-size-warning")).to_contain_text("Gmail clips")
        # A small email: its size, no warning.
        await db.execute("UPDATE posts SET html = '<p>Short</p>' WHERE id = $1", post)
        await page.reload()
        await expect(page.locator("#email-size")).to_contain_text("status:-free")
        assert await page.locator("#email-size-warning").count() == 0

"""The designed email opened in Chromium (Debian's, through Playwright) at a phone's width and at
the template's own: no horizontal scroll, every image within its column, the footer's links there.
PRESSROOM_EMAIL_SCREENSHOT=docs/email.png saves the 600 px view (docs/email-design.md shows it)."""

from __future__ import annotations

import os
import struct
import zlib

import pytest

from pressroom.email_rendering import EmailContent, render
from pressroom.email_template import EmailTemplate
from tests.browser import headless_page, skip_without_chromium

skip_without_chromium()

SITE = "https://site.test"


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A plain PNG of one colour: the images' sizes are what the check is about."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


IMAGES = {"https://cdn.test/feature.png": png(1600, 800, (40, 110, 160)),
          "https://cdn.test/wide.png": png(2400, 600, (200, 120, 60)),
          "https://cdn.test/small.png": png(120, 80, (90, 160, 90))}

BODY = ("<p>Good morning {first_name, \"friend\"}. This week: a long word "
        "Donaudampfschifffahrtsgesellschaftskapitänswitwenversicherung and a link "
        '<a href="https://example.com/a/very/long/path/that/does/not/break/anywhere/at/all/ever">here</a>.</p>'
        '<figure><img src="https://cdn.test/wide.png" alt="wide"><figcaption>A wide picture</figcaption></figure>'
        "<h2>Second part</h2><p>More words.</p>"
        '<p><img src="https://cdn.test/small.png" alt="small"></p>'
        "<pre><code>a_long_line_of_code = compute(" + "argument, " * 30 + ")</code></pre>"
        "<table><tr><td>a</td><td>b</td></tr></table><blockquote>A quote.</blockquote>")


def email_html() -> str:
    template = EmailTemplate(site_title="The Site", post_title="What readers receive", site_url=SITE,
                             post_url=f"{SITE}/what-readers-receive/", excerpt="The newsletter's design, in one email",
                             byline="Ada Lovelace", feature_image="https://cdn.test/feature.png",
                             feature_image_alt="feature", feature_image_caption="The <em>feature</em> image",
                             newsletter_name="Weekly",
                             design={"show_excerpt": True, "footer_content": "<p>Thanks for reading.</p>"})
    rendered = render(EmailContent(email_id="e1", subject="S", html=BODY, visibility="public",
                                   post_url=f"{SITE}/what-readers-receive/",
                                   upgrade_url=f"{SITE}/#/portal/account/plans", site_url=SITE,
                                   template=template), None)
    _, html, _ = rendered.personalise({"first_name": "Ann", "unsubscribe_url": f"{SITE}/unsubscribe/?uuid=u",
                                       "manage_account_url": f"{SITE}/#/portal/account"})
    return html


@pytest.mark.parametrize("width", [375, 600])
async def test_the_email_fits_its_width_with_its_images_and_footer_links(width):
    async with headless_page(viewport={"width": width, "height": 800}) as page:
        async def answer(route):
            await route.fulfill(status=200, content_type="image/png", body=IMAGES[route.request.url])
        await page.route("https://cdn.test/*", answer)
        await page.set_content(email_html(), wait_until="load")
        await page.wait_for_function("Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
        scroll = await page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert scroll[0] <= scroll[1], f"horizontal scroll at {width}px: {scroll}"
        column = await page.evaluate("(() => { const r = document.querySelector('table.container')"
                                     ".getBoundingClientRect(); return [r.left, r.right]; })()")
        images = await page.evaluate("Array.from(document.images).map(i => { const r = i.getBoundingClientRect();"
                                     " return [i.alt, r.left, r.right, r.width]; })")
        assert len(images) == 3
        for alt, left, right, shown in images:
            assert column[0] - 0.5 <= left and right <= column[1] + 0.5 and shown > 0, (width, alt, left, right)
        links = await page.evaluate("Array.from(document.querySelectorAll('.email-footer a'))"
                                    ".map(a => [a.textContent, a.href])")
        assert ["Unsubscribe", f"{SITE}/unsubscribe/?uuid=u"] in links
        assert ["Manage your subscription", f"{SITE}/#/portal/account"] in links
        saved = os.environ.get("PRESSROOM_EMAIL_SCREENSHOT")
        if saved and width == 600:
            await page.screenshot(path=saved, full_page=True)

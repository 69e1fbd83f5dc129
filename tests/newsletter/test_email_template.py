"""The designed email (pressroom/email_template.py): a 600 px table with its styles inlined, the
post's parts and the newsletter's design, and the segment's body inside it with its paywall,
personalisation and tracked links; loaded from the rows as they stand (schema/0083)."""

from __future__ import annotations

import json
import logging
import re

from activities.email_content import load_email
from activities.newsletter.content import check_content
from operations.authoring import edit_newsletter
from pressroom.email_rendering import (
    FREE,
    GMAIL_CLIP_BYTES,
    NOT_FREE,
    EmailContent,
    clip_warning,
    redirect_id,
    render,
    segment_sizes,
)
from pressroom.email_template import EmailTemplate
from tests.newsletter.test_content import run_cli
from workflows.newsletter_models import newsletter_workflow_id

SITE = "https://site.test"
POST = f"{SITE}/the-post/"


def template(**design) -> EmailTemplate:
    return EmailTemplate(site_title="The Site", post_title="A <Title>", site_url=SITE, post_url=POST,
                         excerpt="What it is about", byline="Ada and Bo", feature_image="https://cdn.test/f.jpg",
                         feature_image_alt="a view", feature_image_caption='A <em>view</em><script>x()</script>',
                         newsletter_name="Weekly", design=design)


def content(html: str, *, visibility: str = "public", track: bool = False, **design) -> EmailContent:
    return EmailContent(email_id="e1", subject="S", html=html, visibility=visibility, post_url=POST,
                        upgrade_url=f"{SITE}/#/portal/account/plans", track_clicks=track, site_url=SITE,
                        template=template(**design))


def test_the_template_is_a_600px_table_with_inlined_styles_and_every_part():
    html = render(content('<p>Hi {first_name, "friend"}</p><img src="https://cdn.test/b.png">',
                          show_excerpt=True, footer_content="<p>Sent with care</p>"), None).html
    assert re.search(r'<table[^>]*class="container"[^>]*width="600"', html)
    styles = re.findall(r"<style>(.*?)</style>", html, re.S)
    assert len(styles) == 1 and re.sub(r"@media[^{]*\{(?:[^{}]*\{[^{}]*\})*\s*\}", "", styles[0]).strip() == ""
    assert re.search(r'<td class="content" style="[^"]*font-family', html)  # inlined, not a class rule
    assert re.search(r'<img src="https://cdn.test/b.png" style="[^"]*max-width: 100%', html)
    assert 'content="light dark"' in html and "prefers-color-scheme: dark" in html
    assert "A &lt;Title&gt;" in html and "What it is about" in html and "By Ada and Bo" in html
    assert 'src="https://cdn.test/f.jpg"' in html and 'alt="a view"' in html
    assert "A <em>view</em>" in html and "<script" not in html
    assert re.search(rf'<a href="{POST}"[^>]*>View in browser</a>', html)
    footer = html.split('class="email-footer"', 1)[1]
    assert "The Site" in footer and "Sent with care" in footer
    assert "{{recipient.unsubscribe_url_html}}" in footer and "{{recipient.manage_account_url_html}}" in footer
    assert "Hi {{recipient.first_name_1_html}}" in html  # personalisation stays the provider's placeholder


def test_the_design_switches_and_colours_change_the_email():
    plain = render(content("<p>x</p>"), None).html
    assert "What it is about</p>" not in plain.split("<body")[1].split("</div>", 1)[1]  # excerpt off by default
    changed = render(content("<p>x</p>", show_byline=False, show_feature_image=False, show_badge=False,
                             show_post_title_section=False, background_color="dark", title_font_category="serif",
                             link_color="#112233"), None).html
    assert "By Ada and Bo" not in changed and "cdn.test/f.jpg" not in changed and "Powered by" not in changed
    assert "A &lt;Title&gt;" not in changed.split("<body")[1]
    assert "background-color: #15212a" in changed and "Georgia" in changed
    assert "Powered by" in plain and "Georgia" not in plain


def test_paywall_segments_and_tracked_links_work_inside_the_template():
    body = '<p>Free part <a href="https://a.example/">a</a></p><!--members-only--><p>Paid part</p>'
    free = render(content(body, visibility="paid", track=True), FREE)
    paid = render(content(body, visibility="paid", track=True), NOT_FREE)
    assert "Free part" in free.html and "Paid part" not in free.html and "Paid part" in paid.html
    assert "Paid part" not in free.text and "Free part" in free.text
    view = redirect_id("e1", POST)
    assert view in free.links and redirect_id("e1", "https://a.example/") in free.links
    assert f"{SITE}/r/{view}?m={{{{recipient.uuid}}}}" in free.html
    assert "{{recipient.unsubscribe_url}}" in free.text and "View in browser" in free.text


async def test_the_email_is_rendered_from_the_rows_and_a_design_edit_changes_the_next_one(db, settings):
    newsletter = await db.fetchval("INSERT INTO newsletters (name, slug) VALUES ('Weekly', 'weekly') RETURNING id")
    post = await db.fetchval("INSERT INTO posts (title, slug, html, status, custom_excerpt, newsletter_id) "
                             "VALUES ('Issue one', 'issue-one', '<p>Body</p>', 'published', 'Short', $1) "
                             "RETURNING id", newsletter)
    email = await db.fetchval("INSERT INTO emails (post_id, newsletter_id, subject) VALUES ($1, $2, 'Issue one') "
                              "RETURNING id", post, newsletter)
    async with db.acquire() as conn:
        before = render((await load_email(conn, email, settings)).content, None).html
    assert "Issue one" in before and "Powered by" in before and "Short</p>" not in before
    assert f"{settings.site_url.rstrip('/')}/issue-one/" in before  # view in browser
    await edit_newsletter("weekly", design={"show_badge": False, "show_excerpt": True}, settings=settings)
    async with db.acquire() as conn:
        after = render((await load_email(conn, email, settings)).content, None).html
    assert "Powered by" not in after and "Short</p>" in after


async def _big_email(db, paragraphs: int) -> str:
    body = "".join(f"<p>Paragraph {i} of a long essay, with enough words to weigh something.</p>"
                   for i in range(paragraphs)) + "<!--members-only--><p>Paid</p>"
    newsletter = await db.fetchval("INSERT INTO newsletters (name, slug) VALUES ('Long', 'long') RETURNING id")
    post = await db.fetchval("INSERT INTO posts (title, slug, html, status, visibility, newsletter_id) "
                             "VALUES ('Long read', 'long-read', $1, 'published', 'paid', $2) RETURNING id",
                             body, newsletter)
    return await db.fetchval("INSERT INTO emails (post_id, newsletter_id, subject) VALUES ($1, $2, 'Long read') "
                             "RETURNING id", post, newsletter)


def test_sizes_per_segment_and_the_gmail_warning():
    body = "<p>short</p><!--members-only-->" + "<p>paid words of a long read</p>" * 4000
    sizes = segment_sizes(content(body, visibility="paid"))
    assert set(sizes) == {FREE, NOT_FREE} and sizes[FREE] < GMAIL_CLIP_BYTES < sizes[NOT_FREE]
    warning = clip_warning("e1", sizes)
    assert warning and NOT_FREE in warning and FREE + " " not in warning and "\n" not in warning
    assert clip_warning("e1", {FREE: sizes[FREE]}) is None


async def test_preview_says_the_size_per_segment_and_the_send_check_warns(db, settings, caplog):
    email = await _big_email(db, 2000)
    done = await run_cli(settings, "newsletter", "preview", email, "--segment", "free")
    assert done.returncode == 0, done.stderr
    sizes = re.search(r"^X-Size-Per-Segment: (.*)$", done.stdout, re.M)
    assert sizes and "status:free" in sizes[1] and "status:-free" in sizes[1], done.stdout
    assert "Gmail clips" in done.stderr and "status:-free" in done.stderr
    async with db.acquire() as conn:
        with caplog.at_level(logging.WARNING):
            await check_content(conn, email, settings)  # a warning, not a refusal
    assert any("Gmail clips" in r.getMessage() for r in caplog.records)


async def test_a_small_email_is_previewed_without_a_warning(db, settings):
    email = await _big_email(db, 3)
    done = await run_cli(settings, "newsletter", "preview", email)
    assert done.returncode == 0 and "X-Size-Per-Segment: status:free " in done.stdout and "Gmail" not in done.stderr


async def test_the_send_of_an_email_gmail_would_clip_warns_in_a_line_and_in_its_json(db, settings, dev_env):
    from tests.operations.test_waiting import cli, cli_env

    email = await _big_email(db, 2000)
    code, out, err = await cli("newsletter", "send", email, "--json", env=cli_env(settings, dev_env))
    try:
        assert code == 0, err
        start = json.loads(out)
        assert start["started"] is True and set(start["sizes"]) == {FREE, NOT_FREE}
        assert start["sizes"][NOT_FREE] > GMAIL_CLIP_BYTES and "Gmail clips" in start["warning"]
        assert [line for line in err.splitlines() if "Gmail clips" in line], err  # the warning line
    finally:
        await dev_env.client.get_workflow_handle(newsletter_workflow_id(email)).terminate("the test is done")

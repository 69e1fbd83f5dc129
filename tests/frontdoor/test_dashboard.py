"""An editor in a browser: signs in and out, reads a report whose every number is the CLI's, watches
a send finish, cancels one, finds a member by the filter language and deletes them after confirming."""

from __future__ import annotations

import json
import os
import re

import pytest
from playwright.async_api import Page, expect

from operations.newsletter import start_newsletter
from operations.staff import add_staff
from tests.analytics.conftest import seed_newsletter
from tests.browser import headless_page, skip_without_chromium, wait_for_text
from tests.conftest import make_settings
from tests.newsletter.conftest import seed_email
from tests.operations.test_waiting import cli, cli_env
from worker import running_worker

from .conftest import close_door, open_door

skip_without_chromium()

EDITOR, PASSWORD = "editor@example.com", "correct horse battery"


async def sign_in(page: Page, base: str, email: str = EDITOR, password: str = PASSWORD) -> None:
    await page.goto(f"{base}/pressroom/newsletters")
    await expect(page).to_have_url(re.compile(r"/pressroom/sign-in"))
    await page.get_by_label("Email").fill(email)
    await page.get_by_label("Password").fill(password)
    await page.get_by_role("button", name="Sign in").click()


async def test_an_editor_signs_in_is_refused_with_a_wrong_password_or_no_csrf_token_and_signs_out(db, front_door):
    await add_staff(EDITOR, PASSWORD, settings=front_door.settings)
    async with headless_page() as page:
        for email, password in ((EDITOR, "wrong password here"), ("nobody@example.com", PASSWORD)):
            await sign_in(page, front_door.base, email, password)
            shown = await wait_for_text(page, "do not sign you in")
            assert "Newsletters" not in shown
        wrong_address = await page.locator("main").inner_html()

        # The form without its CSRF token: refused with the same answer, though the password is right.
        await page.goto(f"{front_door.base}/pressroom/sign-in")
        await page.get_by_label("Email").fill(EDITOR)
        await page.get_by_label("Password").fill(PASSWORD)
        await page.locator('input[name="csrf"]').evaluate("input => input.remove()")
        await page.get_by_role("button", name="Sign in").click()
        await wait_for_text(page, "do not sign you in")
        assert await page.locator("main").inner_html() == wrong_address  # one answer for every refusal
        assert await db.fetchval("SELECT count(*) FROM staff_sessions") == 0

        await sign_in(page, front_door.base)
        await expect(page.get_by_role("heading", name="Newsletters")).to_be_visible()
        [cookie] = [c for c in await page.context.cookies() if c["name"] == "pressroom_session"]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["expires"] > 0
        stored = await db.fetchval("SELECT token_hash FROM staff_sessions")
        assert stored != cookie["value"] and len(stored) == 64  # only its hash is kept

        await page.get_by_role("button", name="Sign out").click()
        await expect(page).to_have_url(re.compile(r"/pressroom/sign-in"))
        assert await db.fetchval("SELECT count(*) FROM staff_sessions") == 0  # ended on the server
        await page.goto(f"{front_door.base}/pressroom/newsletters")
        await expect(page).to_have_url(re.compile(r"/pressroom/sign-in"))


async def test_the_report_shows_the_numbers_newsletter_report_json_prints(db, front_door, dev_env):
    await add_staff(EDITOR, PASSWORD, settings=front_door.settings)
    await seed_newsletter(db, members=400, emails=2)
    await db.execute("UPDATE email_batches SET status = 'submitted', provider_id = '<' || id || '@sim>'")
    # e1: 380 delivered, 170 opened, most in the first hours; e0, the week before, did a little worse.
    await db.execute("UPDATE email_recipients SET delivered_at = now() "
                     "WHERE email_id = 'e1' AND substr(member_id, 2)::int < 380")
    await db.execute("UPDATE email_recipients SET opened_at = now() - interval '20 hours' "
                     "+ interval '1 minute' * (substr(member_id, 2)::int ^ 2 / 24) "
                     "WHERE email_id = 'e1' AND substr(member_id, 2)::int < 170")
    await db.execute("UPDATE emails SET email_count = 400, delivered_count = 380, opened_count = 170, "
                     "subject = '<b>Issue</b> & more' WHERE id = 'e1'")
    await db.execute("UPDATE emails SET email_count = 400, delivered_count = 371, opened_count = 142, "
                     "created_at = now() - interval '7 days' WHERE id = 'e0'")
    code, out, err = await cli("newsletter", "report", "e1", "--json", env=cli_env(front_door.settings, dev_env))
    assert code == 0, err
    printed = json.loads(out)
    async with headless_page() as page:
        await sign_in(page, front_door.base)
        await page.get_by_role("link", name="<b>Issue</b> & more").click()  # escaped: shown as typed
        await expect(page.get_by_role("heading", name="Figures")).to_be_visible()
        for key in ("recipients", "sent", "delivered", "opened", "failed", "unsubscribed", "complained"):
            assert await page.locator(f'[data-figure="{key}"]').inner_text() == f"{printed[key]:,}", key
        for key, rate in printed["rates"].items():
            assert await page.locator(f'[data-rate="{key}"]').inner_text() == ("-" if rate is None else f"{rate:.1f}%")
        assert await page.locator("svg.chart rect").count() == len(printed["opens_over_time"]["buckets"])
        await expect(page.get_by_role("heading", name="Against the newsletter's previous emails")).to_be_visible()
        assert await page.locator("tr", has_text="Issue").count() >= 1  # e0, the one before
        if os.environ.get("PRESSROOM_SCREENSHOTS"):  # docs/editors.md's picture: PRESSROOM_SCREENSHOTS=docs
            await page.set_viewport_size({"width": 900, "height": 900})
            await page.screenshot(path=f"{os.environ['PRESSROOM_SCREENSHOTS']}/report.png", full_page=True)


async def test_an_editor_finds_a_member_by_the_filter_language_and_deletes_them_after_confirming(db, front_door):
    await add_staff(EDITOR, PASSWORD, settings=front_door.settings)
    await seed_newsletter(db, members=30, emails=1)
    await db.execute("UPDATE members SET status = 'paid', name = 'Ada Lovelace' WHERE id = 'm7'")
    async with headless_page() as page:
        await sign_in(page, front_door.base)
        await page.get_by_role("link", name="Members").click()
        await page.get_by_label("Filter").fill("status:paid")
        await page.get_by_role("button", name="Find").click()
        await expect(page.locator("tbody tr")).to_have_count(1)
        await page.get_by_role("link", name="member7@example.com").click()
        await expect(page.get_by_role("heading", name="Ada Lovelace")).to_be_visible()

        await page.get_by_role("link", name="Delete").click()  # a GET: a confirmation page, nothing deleted
        await expect(page.get_by_role("heading", name="Delete member m7 and their personal data?")).to_be_visible()
        assert await db.fetchval("SELECT count(*) FROM members WHERE id = 'm7'") == 1
        await page.get_by_role("button", name="Delete the member").click()
        await expect(page).to_have_url(re.compile(r"/pressroom/members\?deleted=m7"))
    assert await db.fetchval("SELECT count(*) FROM members WHERE id = 'm7'") == 0
    assert await db.fetchval("SELECT count(*) FROM email_recipients WHERE member_email = 'member7@example.com'") == 0

    # A filter outside the grammar is named, in one line, and nothing is listed.
    async with headless_page() as page:
        await sign_in(page, front_door.base)
        await page.goto(f"{front_door.base}/pressroom/members?filter=status:paid%2B%2B")
        await wait_for_text(page, "the filter:")


@pytest.fixture
async def sending_door(db, mailgun, dev_env, postgres_url):
    """The front door, a worker, and a provider slow enough to watch a send batch by batch."""
    settings = make_settings(postgres_url, mailgun, batch_size=50, members_link_secret="s" * 32,
                             webhook_signing_key=mailgun.webhook_signing_key,
                             temporal_address=dev_env.client.service_client.config.target_host)
    await add_staff(EDITOR, PASSWORD, settings=settings)
    running = await open_door(settings)
    try:
        async with running_worker(dev_env.client, settings):
            yield running
    finally:
        await close_door(running)


async def test_an_editor_watches_a_send_progress_and_finish(db, mailgun, dev_env, sending_door):
    mailgun.set_faults(latency_ms=400)
    seeded = await seed_email(db, members=500)  # 10 batches, each 0.4 s at the provider
    async with headless_page() as page:
        await sign_in(page, sending_door.base)
        await start_newsletter(seeded.email_id, client=dev_env.client, settings=sending_door.settings)
        await page.goto(f"{sending_door.base}/pressroom/newsletters")  # the email is reached by its link
        await page.locator(f'a[href="/pressroom/emails/{seeded.email_id}"]').first.click()
        await wait_for_text(page, "Sending")
        await expect(page.locator("#progress-words")).to_contain_text("recipients sent")
        await expect(page.locator("#email-status")).to_have_text("submitted", timeout=60_000)  # it reloads
        await expect(page.locator('[data-figure="sent"]')).to_have_text("500")
    mailgun.set_faults(latency_ms=0)


async def test_an_editor_cancels_a_send_from_the_page(db, mailgun, dev_env, sending_door):
    mailgun.set_faults(latency_ms=1500)
    seeded = await seed_email(db, members=1000)  # 20 batches: half a minute at least
    async with headless_page() as page:
        await sign_in(page, sending_door.base)
        await start_newsletter(seeded.email_id, client=dev_env.client, settings=sending_door.settings)
        await page.goto(f"{sending_door.base}/pressroom/emails/{seeded.email_id}")
        await page.get_by_role("link", name="Cancel the send").click()
        await expect(page.get_by_role("heading", name=f"Cancel the send of email {seeded.email_id}?")).to_be_visible()
        await page.get_by_role("button", name="Cancel the send").click()
        await expect(page.locator("#email-status")).to_have_text("cancelled", timeout=60_000)
        shown = await wait_for_text(page, "cancelled by staff-")  # their id: no address in a run's history
        assert EDITOR not in shown
    mailgun.set_faults(latency_ms=0)
    sent = await db.fetchval("SELECT count(*) FROM email_batches WHERE email_id = $1 AND status = 'submitted'",
                             seeded.email_id)
    assert sent < 20

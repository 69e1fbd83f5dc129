"""A person in the Web UI: find a newsletter run by its EmailId and read how far it got."""

from __future__ import annotations

from urllib.parse import quote

from operations.newsletter import follow_newsletter, start_newsletter
from tests.browser import headless_page, skip_without_chromium, wait_for_text
from tests.conftest import make_settings
from tests.newsletter.conftest import seed_email
from worker import running_worker

skip_without_chromium()


async def test_the_web_ui_finds_a_send_by_email_id_and_shows_its_progress(db, mailgun, dev_env, postgres_url):
    settings = make_settings(postgres_url, mailgun, batch_size=100)
    seeded = await seed_email(db, members=250)
    async with running_worker(dev_env.client, settings):
        start = await start_newsletter(seeded.email_id, client=dev_env.client, settings=settings)
        await follow_newsletter(start.workflow_id, client=dev_env.client)

    async with headless_page() as page:
        query = quote(f'EmailId="{seeded.email_id}"')
        await page.goto(f"{dev_env.ui_url}/namespaces/default/workflows?query={query}")
        listing = await wait_for_text(page, start.workflow_id)
        assert "SendNewsletterWorkflow" in listing
        await page.goto(f"{dev_env.ui_url}/namespaces/default/workflows/{start.workflow_id}/{start.run_id}/history")
        detail = await wait_for_text(page, '"batches_submitted": 3', '"recipients_submitted": 250')
        assert "COMPLETED" in detail

"""A person in the Web UI: find a newsletter run by its EmailId and read how far it got."""

from __future__ import annotations

import os
from urllib.parse import quote

import pytest

from operations.newsletter import follow_newsletter, start_newsletter
from tests.browser import chromium_path, headless_page
from tests.conftest import make_settings
from tests.newsletter.conftest import seed_email
from worker import running_worker

if chromium_path() is None and not os.environ.get("PRESSROOM_REQUIRE_BROWSER"):
    pytest.skip("Chromium is not installed (apt-get install chromium); CI installs it and runs this test",
                allow_module_level=True)


async def test_the_web_ui_finds_a_send_by_email_id_and_shows_its_progress(db, mailgun, dev_env, postgres_url):
    settings = make_settings(postgres_url, mailgun, batch_size=100)
    seeded = await seed_email(db, members=250)
    async with running_worker(dev_env.client, settings):
        start = await start_newsletter(seeded.email_id, client=dev_env.client, settings=settings)
        await follow_newsletter(start.workflow_id, client=dev_env.client)

    async with headless_page() as page:
        query = quote(f'EmailId="{seeded.email_id}"')
        await page.goto(f"{dev_env.ui_url}/namespaces/default/workflows?query={query}")
        listing = await page.wait_for_text(start.workflow_id, timeout=30)
        assert "SendNewsletterWorkflow" in listing
        await page.goto(f"{dev_env.ui_url}/namespaces/default/workflows/{start.workflow_id}/{start.run_id}/history")
        detail = await page.wait_for_text('"batches_submitted": 3', '"recipients_submitted": 250', timeout=30)
        assert "COMPLETED" in detail

"""The rest of a post through the Admin API (tags with primary_tag, authors, the feature image, the
excerpt and meta fields, the slug, a backdated published_at): kept, answered back as the reference
answers them, and in the email where the template shows them. A real worker on Temporal's dev
server publishes the post and sends its newsletter to the Mailgun simulator."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.admin_api.conftest import API, token
from tests.admin_api.test_resources import one
from tests.admin_api.test_tokens import error_of
from tests.frontdoor.conftest import close_door, open_door
from tests.newsletter.test_failures import wait_until
from worker import running_worker

BACKDATED = "2024-03-01T09:30:00.000Z"


@pytest.fixture
async def live_api(dev_env, api_settings, admin_key) -> AsyncIterator[tuple[httpx.AsyncClient, object]]:
    settings = api_settings.model_copy(update={"temporal_address": dev_env.client.service_client.config.target_host,
                                               "publish_lead_seconds": 1.0})
    door = await open_door(settings)

    async def sign(request: httpx.Request) -> None:
        request.headers["Authorization"] = f"Ghost {token(admin_key)}"

    try:
        async with running_worker(dev_env.client, settings), httpx.AsyncClient(
                base_url=door.base + API, event_hooks={"request": [sign]}, timeout=30) as client:
            yield client, settings
    finally:
        await close_door(door)


async def test_a_backdated_post_keeps_its_fields_and_its_email_shows_them(live_api, db, mailgun):
    api, _ = live_api
    newsletter = await db.fetchval("INSERT INTO newsletters (name, slug) VALUES ('Weekly', 'weekly') RETURNING id")
    member = await db.fetchval("INSERT INTO members (email, name) VALUES ('reader@example.com', 'R') RETURNING id")
    await db.execute("INSERT INTO members_newsletters (member_id, newsletter_id) VALUES ($1, $2)", member, newsletter)
    fields = {"title": "From the archive", "slug": "from-the-archive", "custom_excerpt": "An old story, told again",
              "meta_title": "Archive", "meta_description": "For search engines",
              "feature_image": "https://cdn.example.com/archive.jpg", "feature_image_alt": "The archive",
              "feature_image_caption": "Shelves, <em>1920</em>"}
    added = await api.post("posts/", params={"source": "html", "newsletter": "weekly"}, json={"posts": [{
        **fields, "html": "<p>Once upon a time.</p>", "status": "published", "published_at": BACKDATED,
        "tags": ["History", {"name": "#internal"}, {"name": "Long reads"}],
        "authors": [{"name": "Ada Writer", "email": "ada@example.com"}, {"name": "Bo"}]}]})
    assert added.status_code == 201, added.text
    post = one(added, "posts")
    assert {k: post[k] for k in fields if k != "feature_image_caption"} == {
        k: v for k, v in fields.items() if k != "feature_image_caption"}
    assert post["status"] == "published" and post["published_at"] == BACKDATED
    assert [(t["name"], t["slug"], t["visibility"]) for t in post["tags"]] == [
        ("History", "history", "public"), ("#internal", "hash-internal", "internal"),
        ("Long reads", "long-reads", "public")]
    assert post["primary_tag"]["slug"] == "history" and post["tags"][0]["url"].endswith("/tag/history/")
    assert [a["name"] for a in post["authors"]] == ["Ada Writer", "Bo"]
    assert post["primary_author"]["slug"] == "ada-writer" and post["authors"][1]["slug"] == "bo"

    # Read back, and edited: an existing tag found by its slug, an author by their address.
    read = one(await api.get(f"posts/{post['id']}/"), "posts")
    assert [t["slug"] for t in read["tags"]] == ["history", "hash-internal", "long-reads"]
    edited = one(await api.put(f"posts/{post['id']}/", json={"posts": [{
        "tags": [{"slug": "long-reads"}], "authors": [{"email": "ADA@example.com"}],
        "updated_at": read["updated_at"]}]}), "posts")
    assert [t["name"] for t in edited["tags"]] == ["Long reads"] and edited["primary_tag"]["slug"] == "long-reads"
    assert [a["id"] for a in edited["authors"]] == [post["authors"][0]["id"]]
    assert edited["published_at"] == BACKDATED
    assert await db.fetchval("SELECT count(*) FROM authors") == 2  # found, not made again
    for body, words in [({"tags": [{"slug": "no-such-tag"}]}, "no tag no-such-tag"),
                        ({"tags": "History"}, "tags must be a list"),
                        ({"authors": [{"slug": "nobody"}]}, "no author nobody")]:
        refused = await api.put(f"posts/{post['id']}/", json={"posts": [body]})
        assert refused.status_code in (404, 422) and words in error_of(refused)["message"], refused.text
    assert [t["slug"] for t in one(await api.get(f"posts/{post['id']}/"), "posts")["tags"]] == ["long-reads"]
    future = await api.post("posts/", params={"source": "html"}, json={"posts": [{
        "title": "Too soon", "html": "<p>x</p>", "status": "published", "published_at": "2999-01-01T00:00:00Z"}]})
    assert future.status_code == 422 and "schedule it instead" in error_of(future)["message"]

    async def sent() -> bool:
        return await db.fetchval("SELECT status = 'submitted' FROM emails WHERE post_id = $1", post["id"]) is True
    await wait_until(sent, timeout=120)
    email_id = await db.fetchval("SELECT id FROM emails WHERE post_id = $1", post["id"])
    [message] = mailgun.messages_for(email_id)
    _, html, text = message.received_by("reader@example.com")
    # The byline is the authors' names as they were when the email was rendered (the first edit is
    # racing the send: either list is the post's).
    assert "By Ada Writer and Bo" in html or "By Ada Writer<" in html, html
    assert 'src="https://cdn.example.com/archive.jpg"' in html and "Shelves, <em>1920</em>" in html
    assert "An old story, told again" in html and "Once upon a time." in text

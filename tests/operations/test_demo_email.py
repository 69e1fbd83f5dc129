"""The demo's post, as the README's demo sends it: written as Lexical with cards, its email the
designed one (the newsletter's template with the post's excerpt and byline around the cards)."""

from __future__ import annotations

from activities.email_content import load_email
from operations.demo_site import seed_site
from pressroom.email_rendering import render


async def test_the_demo_post_is_written_as_lexical_and_its_email_is_the_designed_one(db, settings):
    site = await seed_site(db, members=5, run_tag="designed")
    async with db.acquire() as conn:
        loaded = await load_email(conn, site.email_id, settings)
    assert loaded is not None
    html = render(loaded.content, None).html
    assert 'class="container"' in html and 'width="600"' in html  # the template's 600 px table
    assert "By The Pressroom desk" in html and "Everything Pressroom does, in one minute" in html
    assert "kg-callout-card" in html and "How the design is made" in html  # the cards' email rendering
    assert "Unsubscribe" in html and "View in browser" in html

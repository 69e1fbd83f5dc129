"""A confirmation page posts what it shows: ids in the dashboard's paths are checked by their route,
and every form's action is built from the checked id, never from the request's text."""

from __future__ import annotations

import html
import re

import httpx

from operations.staff import add_staff
from tests.analytics.conftest import seed_newsletter

from .test_dashboard_guard import EDITOR, PASSWORD, signed_in

CONFIRM_PAGES = ["/pressroom/emails/e0/cancel", "/pressroom/emails/e0/send", "/pressroom/members/m1/delete",
                 "/pressroom/members/m1/unsubscribe", "/pressroom/members/m1/resubscribe"]
CRAFTED = ["/pressroom/emails/..%2Fmembers%2Fm1%2Fdelete%3F/cancel",
           "/pressroom/emails/..%2Fmembers%2Fm1%2Fdelete%3F/send",
           "/pressroom/members/m1%2Fdelete%3F/unsubscribe",
           "/pressroom/members/..%2Fmembers%2Fm1%2Fdelete%23/resubscribe",
           "/pressroom/emails/e0%3F/cancel"]


def form_actions(page: str) -> set[str]:
    """Where the page's forms post, but the sign-out every page carries."""
    return {html.unescape(action) for action in re.findall(r'<form method="post" action="([^"]*)"', page)} \
        - {"/pressroom/sign-out"}


async def test_every_confirm_page_posts_to_its_own_path_and_a_crafted_id_gets_no_page(db, front_door):
    await add_staff(EDITOR, PASSWORD, settings=front_door.settings)
    await seed_newsletter(db, members=3, emails=1)
    async with httpx.AsyncClient(base_url=front_door.base) as http:
        csrf = await signed_in(http)
        for path in CONFIRM_PAGES:
            shown = await http.get(path)
            assert shown.status_code == 200, path
            assert form_actions(shown.text) == {path}
        for path in CRAFTED:
            shown = await http.get(path)
            assert shown.status_code == 404, path
            assert form_actions(shown.text) == set()
            posted = await http.post(path, data={"csrf": csrf})
            assert posted.status_code == 404, path
    assert await db.fetchval("SELECT count(*) FROM members WHERE id = 'm1'") == 1
    assert await db.fetchval("SELECT count(*) FROM members_newsletters WHERE member_id = 'm1'") == 1

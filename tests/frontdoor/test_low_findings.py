"""The front door's small findings, each through real HTTP: a `next=` with a line break, a JSON
body nested 200,000 deep, the Server header, a stored target's markup in a Location header."""

from __future__ import annotations

import re

import httpx

from operations.integrations import add_integration
from operations.staff import add_staff
from tests.admin_api.conftest import API, token

from .test_dashboard_guard import EDITOR, PASSWORD


async def test_a_next_with_a_line_break_signs_in_to_the_newsletters_page(db, front_door):
    await add_staff(EDITOR, PASSWORD, settings=front_door.settings)
    for nasty in ("/pressroom/members\r\nSet-Cookie: planted=1", "/pressroom/x\nLocation: //evil.example",
                  "/pressroom/a b"):
        async with httpx.AsyncClient(base_url=front_door.base) as http:
            page = await http.get("/pressroom/sign-in")
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
            answer = await http.post("/pressroom/sign-in", data={"csrf": csrf, "email": EDITOR, "password": PASSWORD,
                                                                 "next": nasty})
            assert answer.status_code == 303 and answer.headers["location"] == "/pressroom/newsletters"
            assert "planted" not in str(answer.headers)


async def test_a_json_body_nested_200000_deep_is_a_validation_error(db, front_door):
    key = (await add_integration("Deep", settings=front_door.settings)).admin_api_key
    async with httpx.AsyncClient(base_url=front_door.base + API, timeout=60) as http:
        answer = await http.post("posts/", content=b"[" * 200_000 + b"]" * 200_000,
                                 headers={"Authorization": f"Ghost {token(key)}", "Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text[:200]
    assert answer.json()["errors"][0]["type"] == "ValidationError"


async def test_no_answer_names_the_server_software(db, front_door):
    async with httpx.AsyncClient(base_url=front_door.base) as http:
        for path in ("/healthz", "/pressroom/sign-in", "/no-such-page", "/r/unknown", "/ghost/api/admin/site/"):
            answer = await http.get(path)
            assert answer.headers["server"] == "Pressroom", path


async def test_a_stored_targets_markup_is_percent_encoded_in_the_location(db, front_door):
    target = 'https://shop.example.com/a"><script>alert(1)</script> b?q=1&r=%20#top'
    await db.execute("""INSERT INTO redirects (id, "from", "to") VALUES ('r1', '/r/abc123', $1)""", target)
    async with httpx.AsyncClient(base_url=front_door.base) as http:
        answer = await http.get("/r/abc123")
    assert answer.status_code == 302
    assert answer.headers["location"] == \
        "https://shop.example.com/a%22%3E%3Cscript%3Ealert(1)%3C/script%3E%20b?q=1&r=%20#top"

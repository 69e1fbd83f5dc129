"""The dashboard's door, over plain HTTP: staff from the CLI, sessions, CSRF, headers, slowed sign-ins."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
from unittest import mock

import httpx
from aiohttp.test_utils import make_mocked_request

from frontdoor.deadlines import client_address
from frontdoor.pages import SignInThrottle
from operations.staff import add_staff
from tests.analytics.conftest import seed_newsletter
from tests.frontdoor.conftest import close_door, open_door
from tests.operations.test_waiting import cli

EDITOR, PASSWORD = "editor@example.com", "correct horse battery"


async def signed_in(http: httpx.AsyncClient) -> str:
    """Sign in; the CSRF token of the session's forms."""
    page = await http.get("/pressroom/sign-in")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
    answer = await http.post("/pressroom/sign-in", data={"csrf": csrf, "email": EDITOR, "password": PASSWORD})
    assert answer.status_code == 303 and answer.headers["location"] == "/pressroom/newsletters"
    shown = await http.get("/pressroom/members/m1/delete")
    return re.search(r'name="csrf" value="([^"]+)"', shown.text).group(1)


async def staff_add(email: str, password: str, env: dict[str, str]) -> tuple[int, str]:
    """`pressroom staff add EMAIL` with the password on standard input (not a terminal)."""
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "starter", "staff", "add", email, env=env,
                                                   stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(f"{password}\n".encode()), 60)
    return process.returncode or 0, (out + err).decode()


async def test_staff_are_added_listed_and_removed_from_the_command_line(db, front_door):
    env = {**os.environ, "DATABASE_URL": front_door.settings.database_url}
    code, said = await staff_add("Ed@Example.com", "short", env)
    assert code == 1 and "at least 12" in said and await db.fetchval("SELECT count(*) FROM staff") == 0
    code, said = await staff_add("ed@example.com", PASSWORD, env)
    assert code == 0, said
    stored = await db.fetchval("SELECT password_hash FROM staff")
    assert stored.startswith("$argon2id$") and PASSWORD not in stored
    code, said = await staff_add("ed@example.com", PASSWORD, env)
    assert code == 1 and "already" in said
    code, out, _ = await cli("staff", "list", env=env)
    assert "ed@example.com" in out
    code, out, _err = await cli("staff", "remove", "ed@example.com", env=env)
    assert code == 0 and await db.fetchval("SELECT count(*) FROM staff") == 0


async def test_pages_send_their_headers_refuse_a_post_without_the_token_and_a_get_changes_nothing(db, front_door,
                                                                                              caplog):
    caplog.set_level(logging.DEBUG)
    await add_staff(EDITOR, PASSWORD, settings=front_door.settings)
    await seed_newsletter(db, members=3, emails=1)
    async with httpx.AsyncClient(base_url=front_door.base) as http:
        assert (await http.get("/pressroom/newsletters")).headers["location"].startswith("/pressroom/sign-in")
        assert (await http.get("/pressroom/emails/e0/status.json")).status_code == 401
        csrf = await signed_in(http)
        page = await http.get("/pressroom/newsletters")
        assert page.status_code == 200
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-frame-options"] == "DENY" and page.headers["cache-control"] == "no-store"

        assert (await http.get("/pressroom/members/m1/delete")).status_code == 200  # the confirmation only
        refused = await http.post("/pressroom/members/m1/delete", data={})
        assert refused.status_code == 403
        forged = await http.post("/pressroom/members/m1/delete", data={"csrf": "0" * 64})
        assert forged.status_code == 403
        assert await db.fetchval("SELECT count(*) FROM members WHERE id = 'm1'") == 1
        done = await http.post("/pressroom/members/m1/delete", data={"csrf": csrf})
        assert done.status_code == 303
        assert await db.fetchval("SELECT count(*) FROM members WHERE id = 'm1'") == 0

        health = await http.get("/pressroom/health")
        assert health.status_code == 200 and "PostgreSQL" in health.text and "Refused at the front door" in health.text
        member = await http.get("/pressroom/members/m2")
        assert "member2@example.com" in member.text and member.headers["cache-control"] == "no-store"
        assert "@example.com" not in caplog.text  # no address in any log line

        # Signing out without the token does not end the session.
        assert (await http.post("/pressroom/sign-out", data={})).status_code == 403
        assert await db.fetchval("SELECT count(*) FROM staff_sessions") == 1


async def test_the_cookies_are_secure_when_the_site_is_https_whatever_host_the_proxy_sends(db, webhook_settings):
    """Behind the documented `proxy_pass http://127.0.0.1:8090` every request says `Host:
    127.0.0.1:8090`: the site's URL decides Secure, not a header anyone can write."""
    for site_url, host, secure in (("https://example.com", "127.0.0.1:8090", True),
                                   ("https://example.com", "localhost", True),
                                   ("http://localhost:2368", "dashboard.example.com", False)):
        door = await open_door(webhook_settings, site_url=site_url)
        try:
            if not await db.fetchval("SELECT count(*) FROM staff"):
                await add_staff(EDITOR, PASSWORD, settings=door.settings)
            async with httpx.AsyncClient(base_url=door.base, headers={"Host": host}) as http:
                page = await http.get("/pressroom/sign-in")
                csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
                [sign_in_cookie] = [c for c in page.headers.get_list("set-cookie")
                                    if c.startswith("pressroom_sign_in=")]
                http.cookies.set("pressroom_sign_in", csrf)  # a Secure cookie is not sent back over plain HTTP
                answer = await http.post("/pressroom/sign-in", data={"csrf": csrf, "email": EDITOR,
                                                                     "password": PASSWORD})
                cookie = next(c for c in answer.headers.get_list("set-cookie") if c.startswith("pressroom_session="))
                assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Max-Age=" in cookie
                assert ("Secure" in cookie) is secure and ("Secure" in sign_in_cookie) is secure, (site_url, host)
        finally:
            await close_door(door)


async def test_failed_sign_ins_from_one_address_hold_back_that_address_even_with_the_right_password(db, front_door):
    await add_staff(EDITOR, PASSWORD, settings=front_door.settings)
    async with httpx.AsyncClient(base_url=front_door.base) as http:
        page = await http.get("/pressroom/sign-in")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
        for _ in range(SignInThrottle.FREE + 6):  # held back 2^6 s after the last
            wrong = await http.post("/pressroom/sign-in", data={"csrf": csrf, "email": EDITOR, "password": "x" * 12})
            assert wrong.status_code == 403
        # Now even the right password is refused for a while, with the same answer.
        right = await http.post("/pressroom/sign-in", data={"csrf": csrf, "email": EDITOR, "password": PASSWORD})
        assert right.status_code == 403 and right.text == wrong.text
    assert await db.fetchval("SELECT count(*) FROM staff_sessions") == 0


async def test_behind_the_operators_proxy_one_clients_failures_do_not_hold_back_another(db, webhook_settings):
    """Every request comes from the proxy's address: the sign-in's slowing reads the client the proxy
    names (its last X-Forwarded-For entry), so one guesser does not lock the editors out."""
    settings = webhook_settings.model_copy(update={"serve_proxies": "127.0.0.1"})
    door = await open_door(settings)
    try:
        await add_staff(EDITOR, PASSWORD, settings=settings)
        async with httpx.AsyncClient(base_url=door.base) as http:
            page = await http.get("/pressroom/sign-in")
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
            guesser = {"X-Forwarded-For": "203.0.113.9, 198.51.100.7"}  # the first is the guesser's to write
            for n in range(SignInThrottle.FREE + 6):
                wrong = await http.post("/pressroom/sign-in", headers=guesser,
                                        data={"csrf": csrf, "email": f"guess{n}@example.com", "password": "x" * 12})
                assert wrong.status_code == 403
            held = await http.post("/pressroom/sign-in", headers={"X-Forwarded-For": "203.0.113.50, 198.51.100.7"},
                                   data={"csrf": csrf, "email": EDITOR, "password": PASSWORD})
            assert held.status_code == 403, "a client that rewrites the header's first entry is still the same client"
            editor = await http.post("/pressroom/sign-in", headers={"X-Forwarded-For": "198.51.100.8"},
                                     data={"csrf": csrf, "email": EDITOR, "password": PASSWORD})
            assert editor.status_code == 303
    finally:
        await close_door(door)


def test_the_client_is_the_peer_unless_the_peer_is_a_proxy():
    def request(peer: str, forwarded: str | None = None):
        headers = {"X-Forwarded-For": forwarded} if forwarded is not None else {}
        transport = mock.Mock()
        transport.get_extra_info.side_effect = lambda name, default=None: (peer, 1234) if name == "peername" \
            else default
        return make_mocked_request("GET", "/", headers=headers, transport=transport)
    proxies = frozenset({"10.0.0.1", "10.0.0.2"})
    assert client_address(request("192.0.2.1", "198.51.100.1"), proxies) == "192.0.2.1"  # not a proxy: not believed
    assert client_address(request("10.0.0.1", "198.51.100.1"), proxies) == "198.51.100.1"
    assert client_address(request("10.0.0.1", "1.2.3.4, 198.51.100.1, 10.0.0.2"), proxies) == "198.51.100.1"
    assert client_address(request("10.0.0.1", "not-an-address"), proxies) == "10.0.0.1"
    assert client_address(request("10.0.0.1"), proxies) == "10.0.0.1"


def test_the_throttle_waits_longer_after_each_failure_and_forgets_a_success():
    throttle = SignInThrottle()
    keys = ("address:192.0.2.1", "account:a@example.com")
    for _ in range(SignInThrottle.FREE):
        assert throttle.allowed(*keys)
        throttle.failed(*keys)
    assert not throttle.allowed(*keys) and not throttle.allowed("account:a@example.com")
    assert throttle.allowed("address:192.0.2.2", "account:b@example.com")  # others are not held up
    throttle.succeeded(*keys)
    assert throttle.allowed(*keys)


async def test_members_are_found_by_part_of_an_address_or_a_name_typed_literally_and_paged(db, front_door):
    from operations.member_search import search_members

    settings = front_door.settings
    await seed_newsletter(db, members=30, emails=0)
    await db.execute("UPDATE members SET name = 'Ada Lovelace', status = 'paid' WHERE id = 'm7'")
    await db.execute("UPDATE members SET email = 'x_y%z@example.com' WHERE id = 'm8'")
    assert [m.member_id for m in (await search_members("LOVELACE", settings=settings)).items] == ["m7"]
    assert len((await search_members("member1", settings=settings)).items) == 11  # m1, m10 … m19
    assert [m.member_id for m in (await search_members("_y%", settings=settings)).items] == ["m8"]
    assert [m.member_id for m in (await search_members("ada", "status:paid", settings=settings)).items] == ["m7"]
    assert (await search_members("ada", "status:free", settings=settings)).items == []
    seen, after = [], None
    while True:
        page = await search_members("example.com", after=after, limit=7, settings=settings)
        seen += [m.member_id for m in page.items]
        if page.next_after is None:
            break
        after = page.next_after
    assert sorted(seen) == sorted(f"m{n}" for n in range(30))

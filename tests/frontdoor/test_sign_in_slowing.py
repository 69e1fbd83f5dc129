"""Failed sign-ins slow the address they come from (an IPv6 client by its /64), not the account:
the owner signs in from elsewhere; and a thousand failures do not overflow the wait."""

from __future__ import annotations

import re

import httpx

from frontdoor.pages import SignInThrottle, slowing_key
from operations.staff import add_staff

EDITOR, PASSWORD = "editor@example.com", "correct horse battery"


def test_an_attacked_account_is_open_from_another_address() -> None:
    throttle = SignInThrottle()
    attacker = slowing_key("2001:db8::1")
    for _ in range(10):
        throttle.failed(attacker)
    assert not throttle.allowed(attacker)
    assert not throttle.allowed(slowing_key("2001:db8::ffff:1"))  # the same /64
    assert throttle.allowed(slowing_key("2001:db8:0:1::1"))
    assert throttle.allowed(slowing_key("192.0.2.7"))


def test_a_thousand_failures_do_not_overflow() -> None:
    throttle = SignInThrottle()
    key = slowing_key("192.0.2.9")
    for _ in range(1100):
        throttle.failed(key)
    assert not throttle.allowed(key)


async def test_the_right_password_from_another_address_signs_in_while_the_attacker_is_held_back(db, front_door):
    """Through the real server: an attacker on 127.0.0.1 fails past the free tries and is held back;
    the editor, on 127.0.0.2, signs in at once with the right password."""
    await add_staff(EDITOR, PASSWORD, settings=front_door.settings)

    async def attempt(local: str, password: str) -> int:
        transport = httpx.AsyncHTTPTransport(local_address=local)
        async with httpx.AsyncClient(base_url=front_door.base, transport=transport) as http:
            page = await http.get("/pressroom/sign-in")
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
            answer = await http.post("/pressroom/sign-in",
                                     data={"csrf": csrf, "email": EDITOR, "password": password})
            return answer.status_code

    for _ in range(SignInThrottle.FREE + 2):
        assert await attempt("127.0.0.1", "a wrong password") == 403
    assert await attempt("127.0.0.1", PASSWORD) == 403  # the attacker's address is held back
    assert await attempt("127.0.0.2", PASSWORD) == 303  # the owner is not

"""Failed sign-ins slow the address they come from (an IPv6 client by its /64), not the account:
the owner signs in from elsewhere; and a thousand failures do not overflow the wait."""

from __future__ import annotations

from frontdoor.pages import SignInThrottle, slowing_key


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

"""The password check runs off the event loop, a bounded number at once; past the bound a sign-in is
refused at once (operations.staff.Busy, answered 429 by the pages) instead of queued."""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Any

import httpx
import pytest

from operations import staff

NEVER = 30.0  # a bound so that a test never hangs, not a timing


class _Pool:
    """Stands in for asyncpg's pool: one staff row, and the sessions' INSERT accepted."""

    def __init__(self, password_hash: str) -> None:
        self.row = {"id": "staff-1", "email": "ed@example.com", "password_hash": password_hash}

    async def fetchrow(self, *_: Any) -> dict[str, str]:
        return self.row

    async def execute(self, *_: Any) -> str:
        return "INSERT 0 1"


async def test_the_loop_answers_while_sign_ins_are_checked_and_past_the_bound_it_is_busy() -> None:
    pool = _Pool(staff._hasher.hash("a right password"))
    checks = [asyncio.create_task(staff.sign_in(pool, "ed@example.com", "a wrong password", at_once=2))
              for _ in range(2)]
    await asyncio.sleep(0)  # both have taken their slot and are on threads
    await asyncio.sleep(0)
    answered_while_outstanding = not all(check.done() for check in checks)
    with pytest.raises(staff.Busy):
        await staff.sign_in(pool, "ed@example.com", "a right password", at_once=2)
    assert answered_while_outstanding  # the loop ran this code while both hashes were being checked
    assert await asyncio.gather(*checks) == [None, None]
    signed = await staff.sign_in(pool, "ed@example.com", "a right password", at_once=2)
    assert signed is not None


async def test_healthz_is_answered_while_every_check_is_busy_and_one_more_sign_in_gets_429(db, front_door,
                                                                                         monkeypatch):
    """Through the real server: the hashing is held by a gate, as many sign-ins as the bound wait on
    it, and meanwhile the loop answers /healthz and refuses one more sign-in at once (429)."""
    await staff.add_staff("ed@example.com", "a right password", settings=front_door.settings)
    gate, entered = threading.Event(), threading.Semaphore(0)
    verify = staff._verify

    def held(password_hash: str, password: str) -> bool:
        entered.release()
        gate.wait(NEVER)
        return verify(password_hash, password)

    monkeypatch.setattr(staff, "_verify", held)
    async with httpx.AsyncClient(base_url=front_door.base, timeout=NEVER) as http:
        page = await http.get("/pressroom/sign-in")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
        form = {"csrf": csrf, "email": "ed@example.com", "password": "a wrong password"}
        checks = [asyncio.create_task(http.post("/pressroom/sign-in", data=form))
                  for _ in range(staff.SIGN_INS_AT_ONCE)]
        try:
            for _ in range(staff.SIGN_INS_AT_ONCE):  # every slot taken: each check is inside the gate
                assert await asyncio.to_thread(entered.acquire, True, NEVER)
            health = await http.get("/healthz")
            assert health.status_code == 200 and health.text.startswith("ok")
            busy = await http.post("/pressroom/sign-in", data={**form, "password": "a right password"})
            assert busy.status_code == 429 and busy.headers["Retry-After"].isdigit()
            assert not any(check.done() for check in checks)  # answered while the checks were held
        finally:
            gate.set()
        assert [answer.status_code for answer in await asyncio.gather(*checks)] == [403] * staff.SIGN_INS_AT_ONCE
        signed = await http.post("/pressroom/sign-in", data={**form, "password": "a right password"})
        assert signed.status_code == 303

"""The password check runs off the event loop, a bounded number at once; past the bound a sign-in is
refused at once (operations.staff.Busy, answered 429 by the pages) instead of queued."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from operations import staff


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

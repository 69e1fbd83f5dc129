"""While a send waits for the account's rolling-day quota (SES): a look at the quota every few
seconds, so that a raised quota (or sends aged out) lets it go on within one look."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel
from temporalio import activity

from activities.heartbeat import heartbeating
from activities.sending_limits import IN_FLIGHT
from pressroom.dependencies import Dependencies


class LookForAccountRoomInput(BaseModel):
    every_seconds: float
    at_most_seconds: float


class AccountRoom(BaseModel):
    room: bool


class AccountQuotaActivities:
    def __init__(self, deps: Dependencies) -> None:
        self.pool = deps.pool
        self.provider = deps.provider

    @activity.defn
    async def look_for_account_room(self, input: LookForAccountRoomInput) -> AccountRoom:
        """Read the provider's quota every `every_seconds` until the account has room again (a quota
        raised, a day's sends aged out), or `at_most_seconds` pass. Safe to repeat: it reserves nothing."""
        started = time.monotonic()
        async with heartbeating():
            while True:
                quota = await self.provider.account_quota(datetime.now(UTC))
                if quota.room_today is None:
                    return AccountRoom(room=True)
                in_flight = await self.pool.fetchval(IN_FLIGHT, datetime.now(UTC) - timedelta(days=1))
                if quota.room_today - in_flight > 0:
                    return AccountRoom(room=True)
                if time.monotonic() - started >= input.at_most_seconds:
                    return AccountRoom(room=False)
                await asyncio.sleep(input.every_seconds)

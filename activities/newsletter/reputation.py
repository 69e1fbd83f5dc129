"""A send's watch on its own reputation: its early hard-bounce and complaint rates, its pause, and
the look for the provider's return during an outage (docs/deliverability.md)."""

from __future__ import annotations

import asyncio
import time

from temporalio import activity

from activities.heartbeat import FIRST_HEARTBEAT_SECONDS, heartbeating
from activities.newsletter.models import (
    EmailReputation,
    ProbeProviderInput,
    ProviderBack,
    ReadReputationInput,
    RecordPauseInput,
)
from pressroom.dependencies import Dependencies
from pressroom.providers.port import ProviderError

# Recipients the provider has answered for so far: delivered, or failed for good (a hard bounce);
# and of them, the hard bounces and the complaints.
EARLY_ANSWERS = """
SELECT (SELECT count(*) FROM email_recipients WHERE email_id = $1 AND delivered_at IS NOT NULL) AS delivered,
       (SELECT count(DISTINCT email_recipient_id) FROM email_recipient_failures
        WHERE email_id = $1 AND severity = 'permanent') AS hard_bounced,
       (SELECT count(*) FROM email_spam_complaint_events WHERE email_id = $1) AS complained"""
RECORD_PAUSE = """
UPDATE emails SET paused_at = CASE WHEN $2 = '' THEN NULL ELSE now() END, paused_reason = nullif($2, ''),
                  updated_at = now()
WHERE id = $1"""
BEAT_SECONDS = 2.0


def pause_reason(answered: int, hard_bounced: int, complained: int, *, min_answered: int, hard_bounce_rate: float,
                 complaint_rate: float, min_complaints: int) -> str:
    """Why a send with these early answers should stop before it spends the domain's reputation, or ""."""
    if answered < min_answered:
        return ""
    if hard_bounce_rate and hard_bounced / answered >= hard_bounce_rate:
        return (f"hard bounces at {hard_bounced / answered:.1%} of the first {answered:,} answered "
                f"(pause at {hard_bounce_rate:.1%})")
    if complaint_rate and complained >= min_complaints and complained / answered >= complaint_rate:
        return (f"complaints at {complained / answered:.2%} of the first {answered:,} answered "
                f"(pause at {complaint_rate:.2%})")
    return ""


class ReputationActivities:
    def __init__(self, deps: Dependencies) -> None:
        self.pool = deps.pool
        self.provider = deps.provider
        self.settings = deps.settings

    @activity.defn
    async def read_reputation(self, input: ReadReputationInput) -> EmailReputation:
        """The email's early answers and whether to pause. Safe to repeat: it only reads."""
        async with heartbeating(first_after=FIRST_HEARTBEAT_SECONDS):  # watched by the send's heartbeat timeout
            row = await self.pool.fetchrow(EARLY_ANSWERS, input.email_id)
        answered = row["delivered"] + row["hard_bounced"]
        s = self.settings
        reason = pause_reason(answered, row["hard_bounced"], row["complained"], min_answered=s.pause_min_answered,
                              hard_bounce_rate=s.pause_hard_bounce_rate, complaint_rate=s.pause_complaint_rate,
                              min_complaints=s.pause_min_complaints)
        return EmailReputation(answered=answered, hard_bounced=row["hard_bounced"], complained=row["complained"],
                               pause_reason=reason)

    @activity.defn
    async def record_pause(self, input: RecordPauseInput) -> None:
        """The email's row says it is paused and why (or no longer). Safe to repeat: it sets, not adds."""
        async with heartbeating(first_after=FIRST_HEARTBEAT_SECONDS):
            await self.pool.execute(RECORD_PAUSE, input.email_id, input.reason)

    @activity.defn
    async def probe_provider(self, input: ProbeProviderInput) -> ProviderBack:
        """Look for the provider's return with an authenticated read every `every_seconds`; answer
        once it answers and `at_least_seconds` have passed, or give up after `at_most_seconds`.
        Safe to repeat: it sends nothing."""
        started = time.monotonic()
        detail = ""
        while True:
            try:
                await self.provider.check_account()
                back = True
            except ProviderError as error:
                back, detail = False, str(error)[:200]
            elapsed = time.monotonic() - started
            if back and elapsed >= input.at_least_seconds:
                return ProviderBack(back=True)
            if elapsed >= input.at_most_seconds:
                return ProviderBack(back=False, detail=detail)
            pause = min(input.every_seconds, input.at_least_seconds - elapsed) if back else input.every_seconds
            await self._sleep_beating(max(pause, 0.1))

    @staticmethod
    async def _sleep_beating(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            activity.heartbeat()
            await asyncio.sleep(min(left, BEAT_SECONDS))

"""The provider's limits: domain warming's schedule, the batch size each domain takes, and send caps.

A new or probation provider account (Mailgun's, say) refuses large batches, and a small plan caps messages per hour
or per day. Pressroom learns the first and respects the second, in PostgreSQL, so that every email
and every worker share them:

* `sending_domain_limits` keeps the batch size a domain takes, learned from its refusals; a
  refused batch is retired and its recipients move to smaller batches (`split_refused_batch`).
* `sending_quota_reservations` counts the recipients reserved per domain in the current clock hour
  and UTC day; `admit_batch` reserves a batch's recipients before it is sent, or says how long to
  wait, or splits it to fit the room that is left.

Why a table and not a task queue's rate limit (it paces activity starts, not messages per day):
docs/production.md, "Send caps".
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import FIRST_HEARTBEAT_SECONDS, heartbeating
from pressroom.providers.port import AccountQuota
from pressroom.providers.wiring import sending_scope

if TYPE_CHECKING:
    import asyncpg

    from pressroom.dependencies import Dependencies
    from pressroom.providers.port import EmailProvider
    from pressroom.settings import Settings

# The reference platform's warm-up: 200 recipients through the custom domain on the first day,
# growing geometrically to 200,000 on day 41; from day 42 on, all of them.
WARMUP_START = 200
WARMUP_END = 200_000
WARMUP_DAYS = 42
RESERVATIONS_KEPT = timedelta(days=7)  # a week of reservations for `pressroom limits show` and audits
ACCOUNT_RECHECK = timedelta(hours=1)  # a used-up rolling day's quota (SES) is looked at this often
ACCOUNT_LOCK = "*account*"  # the advisory lock of a quota counted for the whole account (no domain's name)

# Recipients reserved under the caps whose batches are not sent yet (in the last day): the
# provider's own count of what the account sent cannot include them.
IN_FLIGHT = """
SELECT coalesce(sum(q.recipients), 0) FROM sending_quota_reservations q JOIN email_batches b ON b.id = q.batch_id
WHERE q.reserved_at > $1 AND b.status IN ('pending', 'submitting')"""


def warmup_limit(day: int) -> int | None:
    """How many of an email's recipients go through the custom domain on `day` of warming; None: all."""
    if day >= WARMUP_DAYS:
        return None
    return round(WARMUP_START * (WARMUP_END / WARMUP_START) ** (max(0, day) / (WARMUP_DAYS - 1)))


def sending_domain(settings: Settings, fallback: bool) -> str:
    """The domain a batch goes through: the fallback one for a fallback batch while it is configured."""
    return settings.fallback_domain if fallback and settings.fallback_domain else sending_scope(settings)


# --- the batch size: the one rule batch creation, admission and splitting read --------------------

async def batch_sizes(conn: asyncpg.Connection, settings: Settings,
                      provider: EmailProvider | None = None) -> dict[bool, int]:
    """The batch size per kind of batch (through the fallback domain or not): the setting
    (PRESSROOM_BATCH_SIZE), at most the recipients the provider takes in one call (Mailgun 1,000,
    SES 50), or the smaller size learned from that domain's refusals."""
    most = min(settings.batch_size, provider.limits.max_recipients) if provider is not None else settings.batch_size
    domains = {fallback: sending_domain(settings, fallback) for fallback in (False, True)}
    rows = await conn.fetch("SELECT domain, batch_size FROM sending_domain_limits WHERE domain = ANY($1::text[])",
                            list(set(domains.values())))
    learned = {row["domain"]: row["batch_size"] for row in rows}
    return {fallback: min(most, learned.get(domain, most))
            for fallback, domain in domains.items()}


def size_after_refusal(refused: int, stated_limit: int | None) -> int:
    """The size a domain is taken to accept after refusing a batch of `refused` recipients for its
    size: the limit it stated (below what it refused), else half; at least one."""
    refused = max(1, refused)
    return max(1, min(stated_limit, refused - 1) if stated_limit else refused // 2)


# --- inputs and results ---------------------------------------------------------------------------

class AdmitBatchInput(BaseModel):
    batch_id: str
    at: datetime  # the workflow's clock: a window ends when the workflow's timer says so


class Admission(BaseModel):
    """One of: send it now; send these smaller batches instead; or wait until `resume_at`."""

    batch_id: str
    send: bool = False
    split_into: list[str] = []
    resume_at: datetime | None = None
    reason: str = ""
    account: bool = False  # the wait is for the provider's rolling day (SES): a raised quota ends it



class SplitRefusedBatchInput(BaseModel):
    batch_id: str
    status_code: int | None
    message: str
    refused_size: int
    stated_limit: int | None = None  # "Only N recipients per request", when the provider said it


# --- splitting a batch ----------------------------------------------------------------------------

# Recipients of $1 into new batches "$1.0000", "$1.0001", ...: the first $2, then $3 each.
_SPLIT = """
WITH numbered AS (
    SELECT id, row_number() OVER (ORDER BY id) - 1 AS n FROM email_recipients WHERE batch_id = $1),
placed AS (
    SELECT id, $1 || '.' || lpad((CASE WHEN n < $2 THEN 0 ELSE 1 + (n - $2) / $3 END)::text, 4, '0') AS piece
    FROM numbered),
pieces AS (
    INSERT INTO email_batches (id, email_id, member_segment, fallback_sending_domain)
    SELECT DISTINCT piece, $4::text, $5::text, $6::boolean FROM placed)
UPDATE email_recipients r SET batch_id = p.piece FROM placed p WHERE r.id = p.id"""

# The direct pieces of a retired batch still to send (a retired piece has pieces of its own).
_PIECES = """
SELECT id FROM email_batches
WHERE email_id = $2 AND left(id, length($1) + 1) = $1 || '.' AND strpos(substr(id, length($1) + 2), '.') = 0
  AND status IN ('pending', 'submitting', 'retired')
ORDER BY id"""


async def split_batch(conn: asyncpg.Connection, batch_id: str, *, first: int, size: int,
                      status_code: int | None, reason: str) -> list[str]:
    """Move a batch's recipients into new batches (`first` of them, then `size` each) and retire it.

    Safe to repeat: a retired batch answers with its pieces still to send. Runs in the caller's
    transaction; every recipient stays in exactly one batch.
    """
    batch = await conn.fetchrow("SELECT email_id, member_segment, fallback_sending_domain, status "
                                "FROM email_batches WHERE id = $1 FOR UPDATE", batch_id)
    if batch is None:
        raise ApplicationError(f"batch {batch_id} does not exist", type="BatchNotFound", non_retryable=True)
    if batch["status"] == "retired":
        return [row["id"] for row in await conn.fetch(_PIECES, batch_id, batch["email_id"])]
    if batch["status"] == "submitted":
        return []
    await conn.execute(_SPLIT, batch_id, max(1, first), max(1, size), batch["email_id"], batch["member_segment"],
                       batch["fallback_sending_domain"])
    await conn.execute(
        "UPDATE email_batches SET status = 'retired', error_status_code = $2, error_message = $3, "
        "error_data = jsonb_build_object('message', $3::text), updated_at = now() WHERE id = $1",
        batch_id, status_code, reason[:2000])
    await conn.execute("DELETE FROM sending_quota_reservations WHERE batch_id = $1", batch_id)
    return [row["id"] for row in await conn.fetch(_PIECES, batch_id, batch["email_id"])]


class SendingLimitsActivities:
    def __init__(self, deps: Dependencies) -> None:
        self.pool = deps.pool
        self.settings = deps.settings
        self.provider = deps.provider

    @activity.defn
    async def split_refused_batch(self, input: SplitRefusedBatchInput) -> list[str]:
        """The provider refused the batch for its size: remember a smaller size for its domain and split it.

        Safe to repeat: the size only ever shrinks, and a retired batch answers with its pieces.
        An empty answer means it cannot be split (one recipient): the caller fails it instead.
        """
        async with heartbeating(first_after=FIRST_HEARTBEAT_SECONDS), self.pool.acquire() as conn, conn.transaction():
            batch = await conn.fetchrow(
                "SELECT b.fallback_sending_domain, b.status, (SELECT count(*) FROM email_recipients "
                "WHERE batch_id = b.id) AS n FROM email_batches b WHERE b.id = $1", input.batch_id)
            if batch is None:
                raise ApplicationError(f"batch {input.batch_id} does not exist", type="BatchNotFound",
                                       non_retryable=True)
            if batch["status"] != "retired" and batch["n"] <= 1:
                return []
            domain = sending_domain(self.settings, batch["fallback_sending_domain"])
            refused = max(1, input.refused_size)
            size = await conn.fetchval(
                """INSERT INTO sending_domain_limits (domain, batch_size, refused_size, reason)
                   VALUES ($1, $2, $3, $4)
                   ON CONFLICT (domain) DO UPDATE SET
                       batch_size = least(sending_domain_limits.batch_size, EXCLUDED.batch_size),
                       refused_size = least(sending_domain_limits.refused_size, EXCLUDED.refused_size),
                       reason = EXCLUDED.reason, refused_at = now(), updated_at = now()
                   RETURNING batch_size""",
                domain, size_after_refusal(refused, input.stated_limit), refused, input.message[:2000])
            pieces = await split_batch(conn, input.batch_id, first=size, size=size, status_code=input.status_code,
                                       reason=f"refused for its size; split into batches of {size}: {input.message}")
        activity.logger.info("batch %s of %d refused by %s for its size; %d batches of %d instead",
                             input.batch_id, refused, domain, len(pieces), size)
        return pieces

    @activity.defn
    async def admit_batch(self, input: AdmitBatchInput) -> Admission:
        """May the batch go now? Splits it to its domain's learned size, reserves its recipients
        under the domain's caps, or says when the next window opens.

        Safe to repeat: a reservation is one row per batch, and a retired batch answers with its pieces.
        """
        at = input.at.astimezone(UTC)
        async with heartbeating(first_after=FIRST_HEARTBEAT_SECONDS), self.pool.acquire() as conn, conn.transaction():
            batch = await conn.fetchrow(
                "SELECT b.email_id, b.status, b.fallback_sending_domain, (SELECT count(*) FROM email_recipients "
                "WHERE batch_id = b.id) AS n FROM email_batches b WHERE b.id = $1 FOR UPDATE", input.batch_id)
            if batch is None:
                raise ApplicationError(f"batch {input.batch_id} does not exist", type="BatchNotFound",
                                       non_retryable=True)
            if batch["status"] == "retired":
                pieces = await conn.fetch(_PIECES, input.batch_id, batch["email_id"])
                return Admission(batch_id=input.batch_id, split_into=[row["id"] for row in pieces])
            count = batch["n"]
            # A batch interrupted mid-send may already be with the provider: send_batch reconciles it whole.
            if batch["status"] in ("submitted", "submitting") or count == 0:
                return Admission(batch_id=input.batch_id, send=True)
            domain = sending_domain(self.settings, batch["fallback_sending_domain"])
            size = (await batch_sizes(conn, self.settings, self.provider))[batch["fallback_sending_domain"]]
            if count > size:
                pieces = await split_batch(conn, input.batch_id, first=size, size=size, status_code=None,
                                           reason=f"split into batches of {size}, the size {domain} takes")
                return Admission(batch_id=input.batch_id, split_into=pieces)
            return await self._reserve(conn, input.batch_id, domain, count, at)

    async def _reserve(self, conn: asyncpg.Connection, batch_id: str, domain: str, count: int,
                       at: datetime) -> Admission:
        quota = await self.provider.account_quota(at)
        rolling = quota.room_today is not None  # the provider counts the account's rolling day itself
        caps = send_caps(self.settings, domain, dataclasses.replace(quota, per_day=None) if rolling else quota)
        if not any(caps.values()) and not rolling:
            return Admission(batch_id=batch_id, send=True)
        # One domain's reservations one at a time, across every worker and every email; the whole
        # account's when its quota is counted for the account.
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('pressroom-send-cap:' || $1))",
                           ACCOUNT_LOCK if rolling else domain)
        if await conn.fetchval("SELECT EXISTS (SELECT 1 FROM sending_quota_reservations WHERE batch_id = $1)",
                               batch_id):
            return Admission(batch_id=batch_id, send=True)
        starts = {"hour": at.replace(minute=0, second=0, microsecond=0),
                  "day": at.replace(hour=0, minute=0, second=0, microsecond=0)}
        used = await conn.fetchrow(
            """SELECT coalesce(sum(recipients) FILTER (WHERE reserved_at >= $2), 0) AS hour,
                      coalesce(sum(recipients), 0) AS day
               FROM sending_quota_reservations WHERE domain = $1 AND reserved_at >= $3""",
            domain, starts["hour"], starts["day"])
        rooms = {window: cap - used[window] for window, cap in caps.items() if cap}
        if rolling:
            # SES's count leaves out what is reserved and not sent yet, by any worker of any domain.
            in_flight = await conn.fetchval(IN_FLIGHT, at - timedelta(days=1))
            rooms["account"] = quota.room_today - in_flight
        room = min(rooms.values())
        if room >= count:
            await conn.execute("DELETE FROM sending_quota_reservations WHERE domain = $1 AND reserved_at < $2",
                               domain, starts["day"] - RESERVATIONS_KEPT)
            await conn.execute("INSERT INTO sending_quota_reservations (batch_id, domain, recipients, reserved_at) "
                               "VALUES ($1, $2, $3, $4)", batch_id, domain, count, at)
            return Admission(batch_id=batch_id, send=True)
        window = min(rooms, key=lambda name: rooms[name])
        if room > 0:
            what = (f"{self.provider.title}'s 24-hour sending quota" if window == "account" else
                    f"{'hourly' if window == 'hour' else 'daily'} limit of {domain}")
            pieces = await split_batch(conn, batch_id, first=room, size=count, status_code=None,
                                       reason=f"split to fit the {room} messages left under the {what}")
            return Admission(batch_id=batch_id, split_into=pieces)
        if window == "account":
            resume_at = await self._account_room_at(conn, at)
            reason = (f"waiting for {self.provider.title}'s 24-hour sending quota ({quota.per_day:,} messages, "
                      f"{quota.sent_last_24_hours:,} sent in the last 24 hours), looks again at "
                      f"{resume_at:%Y-%m-%d %H:%M} UTC")
            return Admission(batch_id=batch_id, resume_at=resume_at, reason=reason, account=True)
        window = "day" if rooms.get("day", 1) <= 0 else "hour"
        resume_at = starts[window] + (timedelta(days=1) if window == "day" else timedelta(hours=1))
        reason = (f"waiting for the {'daily' if window == 'day' else 'hourly'} limit of {domain} "
                  f"({caps[window]:,} messages), resumes at {resume_at:%Y-%m-%d %H:%M} UTC")
        return Admission(batch_id=batch_id, resume_at=resume_at, reason=reason)

    @staticmethod
    async def _account_room_at(conn: asyncpg.Connection, at: datetime) -> datetime:
        """When to look at a rolling day's quota again: when the oldest of our own sends in it leaves
        it, or within ACCOUNT_RECHECK (sends of others count too, and leave it on their own)."""
        oldest = await conn.fetchval("SELECT min(reserved_at) FROM sending_quota_reservations WHERE reserved_at > $1",
                                     at - timedelta(days=1))
        leaves = oldest + timedelta(days=1) if oldest is not None else at + ACCOUNT_RECHECK
        return max(at + timedelta(minutes=1), min(leaves, at + ACCOUNT_RECHECK))


def send_caps(settings: Settings, domain: str, quota: AccountQuota) -> dict[str, int | None]:
    """The caps of `domain` per "hour" and "day": the configured one (PRESSROOM_HOURLY/DAILY_SEND_LIMIT)
    or the account's stated quota (SES: MaxSendRate × 3,600 an hour, Max24HourSend a day), the
    smaller when both; None: no cap."""
    stated = {"hour": quota.per_hour, "day": quota.per_day}
    given = {window: [cap for cap in (settings.send_limit(domain, window), stated[window]) if cap is not None]
             for window in ("hour", "day")}
    return {window: min(caps) if caps else None for window, caps in given.items()}


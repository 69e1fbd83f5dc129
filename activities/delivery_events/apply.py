"""A batch applied in one transaction with the caller's own step; an event PostgreSQL refuses is found
by halving the batch and set aside alone."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg

from pressroom.delivery_events import EventRejected
from pressroom.store.events import EventBatch, SetAside, Source
from pressroom.store.members import LEAVE, REMOVED

# Codes that suppress an address: the SMTP hard-bounce codes (no such mailbox, domain, policy)
# and Mailgun's own 605/607 ("previously bounced" / "marked as spam") after which Ghost suppresses.
BOUNCE_SUPPRESSION_CODES = [550, 551, 553, 554, 605, 607]


@dataclass
class Applied:
    matched: int = 0  # events matched to a recipient and applied
    unknown: int = 0  # for an email or a recipient we do not know
    rejected: int = 0  # set aside, with their reason

    def __iadd__(self, other: Applied) -> Applied:
        self.matched += other.matched
        self.unknown += other.unknown
        self.rejected += other.rejected
        return self


# --- SQL: a batch's times in one statement; failures, unsubscribes and complaints by kind ---------

# The times every event sets and the dirty marks, in one statement. The batch's events are reduced
# to one row per (email, address); each recipient row is found once, by its address, and a time
# changes only to an earlier one (the first event wins, whatever order events come in). When every
# row changed (the common case: new events), those rows are the matched ones; only otherwise
# (re-read events, unknown recipients, events that set no time) are the rows looked up again to
# count and mark them. The answer: events matched.
_APPLY_TIMES = """
WITH ev AS (
    SELECT * FROM unnest($1::text[], $2::float8[], $3::text[], $4::text[], $5::text[])
           AS t(kind, ts, email_id, provider_id, address)
), grouped AS (
    SELECT COALESCE(ev.email_id, b.email_id) AS email_id, ev.address, count(*) AS events,
           to_timestamp(min(ev.ts) FILTER (WHERE ev.kind = 'delivered')) AS delivered,
           to_timestamp(min(ev.ts) FILTER (WHERE ev.kind = 'opened')) AS opened,
           to_timestamp(min(ev.ts) FILTER (WHERE ev.kind = 'failed-permanent')) AS failed
    FROM ev LEFT JOIN email_batches b ON ev.email_id IS NULL AND b.provider_id = ev.provider_id
    WHERE COALESCE(ev.email_id, b.email_id) IS NOT NULL
    GROUP BY 1, 2
), changed AS (
    UPDATE email_recipients er SET
        delivered_at = LEAST(er.delivered_at, g.delivered),
        opened_at = LEAST(er.opened_at, g.opened),
        failed_at = LEAST(er.failed_at, g.failed)
    FROM grouped g
    WHERE er.email_id = g.email_id AND er.member_email = g.address
      AND (g.delivered < COALESCE(er.delivered_at, 'infinity') OR g.opened < COALESCE(er.opened_at, 'infinity')
           OR g.failed < COALESCE(er.failed_at, 'infinity'))
    RETURNING er.email_id, er.member_id, g.events
), matched AS MATERIALIZED (
    SELECT er.email_id, er.member_id, g.events
    FROM grouped g JOIN email_recipients er ON er.email_id = g.email_id AND er.member_email = g.address
    WHERE (SELECT count(*) FROM changed) < (SELECT count(*) FROM grouped)  -- else not even run
), dirty_emails AS (
    INSERT INTO email_analytics_dirty_emails
    SELECT email_id FROM changed UNION SELECT email_id FROM matched ON CONFLICT DO NOTHING
), dirty_members AS (
    INSERT INTO email_analytics_dirty_members
    SELECT member_id FROM changed UNION ALL SELECT member_id FROM matched ON CONFLICT DO NOTHING
)
SELECT CASE WHEN (SELECT count(*) FROM changed) = (SELECT count(*) FROM grouped)
            THEN (SELECT sum(events) FROM grouped) ELSE (SELECT sum(events) FROM matched) END::bigint"""

_MATCHED_TABLE = """
CREATE TEMP TABLE IF NOT EXISTS analytics_matched (
    event_id text, kind text, severity text, at timestamptz, email_id text, recipient_id text,
    member_id text, address text, code integer, enhanced_code text, message text, before_resubscribe boolean
) ON COMMIT DELETE ROWS"""

# An unsubscribe, complaint or bounce from before the member was resubscribed is history read
# again (`before_resubscribe`): it is recorded, and leaves their subscriptions and address alone.
_MATCH = """
WITH ev AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::text[], $6::text[],
                         $7::text[], $8::int[], $9::text[], $10::text[])
           AS t(event_id, kind, severity, ts, email_id, provider_id, address, code, enhanced_code, message)
), resolved AS (
    SELECT ev.*, COALESCE(ev.email_id, b.email_id) AS resolved_email_id
    FROM ev LEFT JOIN email_batches b ON ev.email_id IS NULL AND b.provider_id = ev.provider_id
)
INSERT INTO analytics_matched
SELECT r.event_id, r.kind, r.severity, to_timestamp(r.ts), er.email_id, er.id, er.member_id, r.address,
       r.code, r.enhanced_code, r.message, (to_timestamp(r.ts) <= m.resubscribed_at) IS TRUE
FROM resolved r JOIN email_recipients er ON er.email_id = r.resolved_email_id AND er.member_email = r.address
LEFT JOIN members m ON m.id = er.member_id"""

# One failure row per recipient of an email, as Ghost keeps it: a later temporary failure replaces
# a temporary one, a permanent one replaces a temporary one, only an earlier permanent one replaces
# a permanent one (so events in any order end the same). A batch is first reduced to the event
# that would stand had its events come one by one in time order (the first permanent one, else the
# latest temporary one), then merged with the stored row. A failure explained with nothing is
# stored as "Error <code>".
_FAILURES = """
WITH failed AS (
    SELECT email_id, member_id, recipient_id, code, enhanced_code, message, at, event_id, severity
    FROM analytics_matched WHERE kind IN ('failed-permanent', 'failed-temporary')
), standing AS (
    SELECT DISTINCT ON (recipient_id) *
    FROM failed
    ORDER BY recipient_id, severity = 'permanent' DESC, CASE WHEN severity = 'permanent' THEN at END,
             at DESC, event_id
)
INSERT INTO email_recipient_failures AS f (email_id, member_id, email_recipient_id, code, enhanced_code, message,
                                           severity, failed_at, event_id)
SELECT email_id, member_id, recipient_id, COALESCE(code, 0), enhanced_code,
       COALESCE(message, 'Error ' || COALESCE(code::text, enhanced_code, 'without a code')), severity, at, event_id
FROM standing
ON CONFLICT (email_recipient_id) DO UPDATE SET
    code = EXCLUDED.code, enhanced_code = EXCLUDED.enhanced_code, message = EXCLUDED.message,
    severity = EXCLUDED.severity, failed_at = EXCLUDED.failed_at, event_id = EXCLUDED.event_id
WHERE (f.severity = 'temporary' AND (EXCLUDED.severity = 'permanent' OR EXCLUDED.failed_at > f.failed_at))
   OR (f.severity = 'permanent' AND EXCLUDED.severity = 'permanent' AND EXCLUDED.failed_at < f.failed_at)"""

# The provider's unsubscribe events: the email's newsletter (an email without one leaves nothing).
_UNSUBSCRIBE = LEAVE.format(before="", answer=REMOVED, leaving="""
    SELECT m.member_id, e.newsletter_id, 'provider'::text AS source, m.email_id, m.at
    FROM analytics_matched m JOIN emails e ON e.id = m.email_id
    WHERE m.kind = 'unsubscribed' AND NOT m.before_resubscribe AND m.member_id IS NOT NULL
      AND e.newsletter_id IS NOT NULL""")

_COMPLAINTS = """
INSERT INTO email_spam_complaint_events (member_id, email_id, email_address)
SELECT member_id, email_id, address FROM analytics_matched WHERE kind = 'complained'
ON CONFLICT (email_id, member_id) DO NOTHING"""

_SUPPRESS = """
INSERT INTO suppressions (email, email_id, reason)
SELECT address, email_id, CASE WHEN kind = 'complained' THEN 'spam' ELSE 'bounce' END
FROM analytics_matched
WHERE (kind = 'complained' OR (kind = 'failed-permanent' AND code = ANY($1::int[]))) AND NOT before_resubscribe
ON CONFLICT (email) DO NOTHING"""

# An event set aside is kept once: seen again (a re-read page, a push and a poll), it is a no-op.
_SET_ASIDE = """
INSERT INTO delivery_events_rejected (provider, source, event_id, reason, event, digest)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
ON CONFLICT (provider, digest) DO NOTHING"""

# What PostgreSQL answers for a value it cannot take (data exceptions, constraints) and a value
# asyncpg cannot encode: the event is at fault, not the database, so it is set aside.
_EVENT_AT_FAULT = (asyncpg.DataError, asyncpg.IntegrityConstraintViolationError, UnicodeEncodeError)


def rows_of(status: str) -> int:
    return int(status.rsplit(" ", 1)[-1]) if status and status[-1].isdigit() else 0


async def _apply_events(conn: asyncpg.Connection, batch: EventBatch) -> int:
    if not batch.events:
        return 0
    matched = await conn.fetchval(_APPLY_TIMES, *batch.time_columns()) or 0
    records = batch.records()
    if records and matched:
        await conn.execute(_MATCHED_TABLE)
        if rows_of(await conn.execute(_MATCH, *records)):
            await conn.execute(_FAILURES)
            await conn.fetchval(_UNSUBSCRIBE)
            await conn.execute(_COMPLAINTS)
            await conn.execute(_SUPPRESS, BOUNCE_SUPPRESSION_CODES)
    return matched


async def apply_batch(pool: asyncpg.Pool, batch: EventBatch, source: Source,
                      then: Callable[[asyncpg.Connection], Awaitable[Any]] | None = None) -> Applied:
    """Apply a batch, set its rejected events aside and run `then` (the caller's step), in one
    transaction; safe to repeat. An event PostgreSQL refuses is found by halving and set aside."""
    try:
        async with pool.acquire() as conn, conn.transaction():
            matched = await _apply_events(conn, batch)
            if batch.rejected:
                await conn.execute(_SET_ASIDE, *batch.rejected_columns(source))
            if then is not None:
                await then(conn)
        return Applied(matched=matched, unknown=len(batch) - matched, rejected=len(batch.rejected))
    except _EVENT_AT_FAULT as error:
        if len(batch.events) == 0:
            raise  # nothing of the events' is left to blame: the caller's step failed
        if len(batch.events) == 1:
            event = batch.events[0]
            why = getattr(error, "sqlstate", None) or type(error).__name__
            refused = EventRejected(provider=event.provider, event_id=event.event_id,
                                    reason=f"PostgreSQL refused it ({why})")
            alone = EventBatch(rejected=[*batch.rejected, SetAside(refused, event.model_dump_json())])
            return await apply_batch(pool, alone, source, then)
    first, second = batch.halves()
    first.rejected = batch.rejected
    applied = await apply_batch(pool, first, source)
    applied += await apply_batch(pool, second, source, then)
    return applied

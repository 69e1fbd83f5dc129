"""Applying delivery events, whichever way they came (a polled page, a pushed webhook): one way.

Events arrive as provider JSON; `EventBatch.add` turns each into a DeliveryEvent through the
provider's parser (the port's `parse_event`) or sets it aside with its reason. `apply_batch` applies a batch in one
transaction together with the caller's own step (a cursor saved, inbox rows deleted), so what was
applied and where the caller stands commit together. Applying is idempotent and order-free: a time
takes the earliest event's, failures are one row per recipient whichever order their events come
in, complaints by (email, member), suppressions by address; an event seen again changes nothing.
An event PostgreSQL refuses all the same is found by halving the batch and set aside alone: one
poison event never holds the others back, and never comes back (`delivery_events_rejected`).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import asyncpg

from pressroom.delivery_events import APPLIED_KINDS, RECORDED_KINDS, DeliveryEvent, EventRejected

# Codes that suppress an address: the SMTP hard-bounce codes (no such mailbox, domain, policy)
# and Mailgun's own 605/607 ("previously bounced" / "marked as spam") after which Ghost suppresses.
BOUNCE_SUPPRESSION_CODES = [550, 551, 553, 554, 605, 607]
RAW_LIMIT = 65536  # characters of a rejected event kept for an operator to read
Source = Literal["poll", "push"]
Parse = Callable[[Any], "DeliveryEvent | EventRejected"]  # the provider's parser (EmailProvider.parse_event)


def raw_text(item: Any) -> str:
    """The event as JSON text an operator can read and PostgreSQL can store (NUL and lone surrogates
    escaped as \\u0000 …), whatever it holds."""
    try:
        return json.dumps(item, ensure_ascii=True, default=repr)
    except (RecursionError, ValueError, TypeError):
        return json.dumps(repr(item)[:RAW_LIMIT])


@dataclass(slots=True)
class SetAside:
    rejection: EventRejected
    raw: str


@dataclass
class EventBatch:
    """Events to apply (only the kinds that change something), those set aside, and counts by type."""

    events: list[DeliveryEvent] = field(default_factory=list)
    rejected: list[SetAside] = field(default_factory=list)
    by_type: Counter[str] = field(default_factory=Counter)

    def __len__(self) -> int:
        return len(self.events)

    @property
    def malformed(self) -> int:
        return len(self.rejected)

    def add(self, items: Iterable[Any], parse: Parse) -> None:
        for item in items:
            self.add_one(item, parse)

    def add_one(self, item: Any, parse: Parse, raw: str | None = None) -> None:
        parsed = parse(item)
        if isinstance(parsed, EventRejected):
            self.rejected.append(SetAside(parsed, raw if raw is not None else raw_text(item)))
            return
        self.by_type[parsed.name] += 1
        if parsed.kind in APPLIED_KINDS:
            self.events.append(parsed)

    def halves(self) -> tuple[EventBatch, EventBatch]:
        middle = len(self.events) // 2
        return EventBatch(self.events[:middle]), EventBatch(self.events[middle:])

    def time_columns(self) -> tuple[list, ...]:
        events = self.events
        return ([e.kind for e in events], [e.timestamp for e in events], [e.email_id for e in events],
                [e.provider_message_id for e in events], [e.recipient for e in events])

    def records(self) -> tuple[list, ...] | None:
        """Failures, unsubscribes and complaints as columns for one unnest, or None: most batches hold none."""
        recorded = [e for e in self.events if e.kind in RECORDED_KINDS]
        if not recorded:
            return None
        return ([e.event_id for e in recorded], [e.kind for e in recorded], [e.severity for e in recorded],
                [e.timestamp for e in recorded], [e.email_id for e in recorded],
                [e.provider_message_id for e in recorded], [e.recipient for e in recorded],
                [e.code for e in recorded], [e.enhanced_code for e in recorded], [e.message for e in recorded])

    def rejected_columns(self, source: Source) -> tuple[list, ...]:
        aside = self.rejected
        return ([a.rejection.provider for a in aside], [source] * len(aside), [a.rejection.event_id for a in aside],
                [a.rejection.reason for a in aside], [a.raw[:RAW_LIMIT] for a in aside],
                [hashlib.sha256(a.raw.encode()).hexdigest() for a in aside])


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

# One way to leave, whoever asks (a provider's event, a member's link, an operator): `leaving` names
# (member_id, newsletter_id or NULL for every newsletter, source, email_id, at); the subscriptions
# are removed and each removal recorded with its source, time and email. A subscription already gone
# records nothing, so a repeat changes nothing. Answers the subscriptions removed.
_LEAVE = """
WITH {before}leaving AS ({leaving}), removed AS (
    DELETE FROM members_newsletters mn USING leaving l
    WHERE mn.member_id = l.member_id AND (l.newsletter_id IS NULL OR mn.newsletter_id = l.newsletter_id)
    RETURNING mn.member_id, mn.newsletter_id
), recorded AS (
    INSERT INTO members_subscribe_events (member_id, newsletter_id, subscribed, source, email_id, created_at)
    SELECT DISTINCT ON (r.member_id, r.newsletter_id) r.member_id, r.newsletter_id, false, l.source, l.email_id, l.at
    FROM removed r JOIN leaving l
      ON l.member_id = r.member_id AND (l.newsletter_id IS NULL OR l.newsletter_id = r.newsletter_id)
    ORDER BY r.member_id, r.newsletter_id, l.at
    RETURNING 1
)
{answer}"""
_REMOVED = "SELECT count(*) FROM recorded"

# The provider's unsubscribe events: the email's newsletter (an email without one leaves nothing).
_UNSUBSCRIBE = _LEAVE.format(before="", answer=_REMOVED, leaving="""
    SELECT m.member_id, e.newsletter_id, 'provider'::text AS source, m.email_id, m.at
    FROM analytics_matched m JOIN emails e ON e.id = m.email_id
    WHERE m.kind = 'unsubscribed' AND NOT m.before_resubscribe AND m.member_id IS NOT NULL
      AND e.newsletter_id IS NOT NULL""")

# One member's leaving (a link, an operator): the email is kept only when they received it, so a
# link's unsigned `email` parameter cannot count a leaving against another email.
_LEAVE_ONE = _LEAVE.format(before="", answer=_REMOVED, leaving="""
    SELECT $1::text AS member_id, $2::text AS newsletter_id, $3::text AS source,
           (SELECT er.email_id FROM email_recipients er WHERE er.email_id = $4 AND er.member_id = $1 LIMIT 1)
               AS email_id, now() AS at""")


# A member's link: the member and the newsletter found by their uuids and the member left, in one
# statement (one round trip per click). $3: every newsletter. No row: no such member; a row without
# newsletter_id while one was named: no such newsletter (and nothing left).
_LEAVE_BY_LINK = _LEAVE.format(
    before="""target AS (
    SELECT m.id AS member_id, m.email, n.id AS newsletter_id, n.name AS newsletter_name
    FROM members m LEFT JOIN newsletters n ON n.uuid = $2::uuid WHERE m.uuid = $1::uuid
), """,
    leaving="""
    SELECT t.member_id, CASE WHEN $3 THEN NULL ELSE t.newsletter_id END AS newsletter_id, 'link'::text AS source,
           (SELECT er.email_id FROM email_recipients er WHERE er.email_id = $4 AND er.member_id = t.member_id
            LIMIT 1) AS email_id, now() AS at
    FROM target t WHERE $2::uuid IS NULL OR t.newsletter_id IS NOT NULL""",
    answer="SELECT t.*, (SELECT count(*) FROM recorded) AS removed FROM target t")


async def leave_by_link(pool_or_conn, member_uuid: str, newsletter_uuid: str | None, every: bool,
                        email_id: str | None) -> asyncpg.Record | None:
    """The link's member leaves (as `leave` does, recorded as `link`): (member_id, email,
    newsletter_id, newsletter_name, removed), or None when no member has that uuid."""
    return await pool_or_conn.fetchrow(_LEAVE_BY_LINK, member_uuid, newsletter_uuid, every, email_id)


async def leave(conn: asyncpg.Connection, member_id: str, newsletter_id: str | None, source: str,
                email_id: str | None = None) -> int:
    """Unsubscribe a member from a newsletter (None: from every one) exactly as the provider's
    unsubscribe event does, recorded with `source`; the subscriptions removed. Safe to repeat."""
    return await conn.fetchval(_LEAVE_ONE, member_id, newsletter_id, source, email_id)

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

# An email's figures, with its first and last open (the report's opens chart spans them).
_AGGREGATE_EMAILS = """
WITH dirty AS (DELETE FROM email_analytics_dirty_emails RETURNING email_id),
counts AS (
    SELECT er.email_id, count(er.delivered_at) AS delivered, count(er.opened_at) AS opened,
           count(er.failed_at) AS failed, min(er.opened_at) AS first_open, max(er.opened_at) AS last_open
    FROM email_recipients er WHERE er.email_id IN (SELECT email_id FROM dirty) GROUP BY er.email_id)
UPDATE emails e SET delivered_count = c.delivered, opened_count = c.opened, failed_count = c.failed,
                    first_opened_at = c.first_open, last_opened_at = c.last_open, updated_at = now()
FROM counts c WHERE e.id = c.email_id"""

# Open rate as Ghost computes it: opened / emails with open tracking, only from 5 tracked emails.
# A member whose figures come out as stored is not written: a member row rewritten is a new row
# version and an entry in each of its indexes, and most recounts after a re-read page, a delivery
# or a failure find the figures unchanged.
_AGGREGATE_MEMBERS = """
WITH dirty AS (DELETE FROM email_analytics_dirty_members RETURNING member_id),
counts AS (
    SELECT er.member_id, count(*) AS received, count(er.opened_at) AS opened,
           count(*) FILTER (WHERE e.track_opens) AS tracked
    FROM email_recipients er JOIN emails e ON e.id = er.email_id
    WHERE er.member_id IN (SELECT member_id FROM dirty) GROUP BY er.member_id),
figures AS (
    SELECT member_id, received, opened,
           CASE WHEN tracked >= 5 THEN LEAST(100, round(100.0 * opened / tracked))::int END AS rate
    FROM counts)
UPDATE members m SET email_count = f.received, email_opened_count = f.opened, email_open_rate = f.rate,
    updated_at = now()
FROM figures f WHERE m.id = f.member_id
  AND (m.email_count, m.email_opened_count, m.email_open_rate) IS DISTINCT FROM (f.received, f.opened, f.rate)"""

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
            refused = EventRejected(provider=event.provider, event_id=event.event_id,
                                    reason=f"PostgreSQL refused it ({getattr(error, 'sqlstate', None) or type(error).__name__})")
            alone = EventBatch(rejected=[*batch.rejected, SetAside(refused, event.model_dump_json())])
            return await apply_batch(pool, alone, source, then)
    first, second = batch.halves()
    first.rejected = batch.rejected
    applied = await apply_batch(pool, first, source)
    applied += await apply_batch(pool, second, source, then)
    return applied


async def aggregate(conn: asyncpg.Connection) -> tuple[int, int]:
    """Recount the emails and members whose events changed: (emails, members whose figures changed);
    safe to repeat."""
    emails = rows_of(await conn.execute(_AGGREGATE_EMAILS))
    members = rows_of(await conn.execute(_AGGREGATE_MEMBERS))
    return emails, members

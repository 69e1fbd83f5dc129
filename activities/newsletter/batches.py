"""Batch creation: every recipient of the email in exactly one batch.

Written in one transaction, or chunked: one chunk per call, each committed whole, so that the
first batches go out while the rest are written. Existing batches are reused; a new send of a
failed email sends its failed batches again. Safe to repeat: a creation resumes from its cursor.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg
from temporalio import activity

from activities.errors import non_retryable
from activities.heartbeat import FIRST_HEARTBEAT_SECONDS, heartbeating
from activities.newsletter.audience import AUDIENCE_BY_SEGMENT, NOT_SKIPPED, RECIPIENTS, SEGMENT, Audience, audience
from activities.newsletter.chunks import RANK_KEY, WRITE_CHUNK, creation_groups, creation_segments, falls_back
from activities.newsletter.content import load_for_sending
from activities.newsletter.counts import batch_counts
from activities.newsletter.left_out import record_left_out
from activities.newsletter.models import BatchCounts, CreateBatchesInput
from activities.sending_limits import batch_sizes, warmup_limit
from pressroom.dependencies import Dependencies
from pressroom.email_rendering import FREE, FREE_OF_TIER, NOT_FREE, NOT_FREE_OF_TIER, segments_of
from pressroom.inputs import PLAIN_ADDRESS, PLAIN_DOMAIN_LENGTH, SPECIAL_USE_DOMAINS, recipient_problem
from pressroom.providers.wiring import sending_scope
from pressroom.recipient_filter import FilterError

SKIPPED_SHOWN = 20  # members named in the log line of an email's left-out members; the rest are counted
# The email's count becomes the recipients written ($2); the site's own count is kept when they
# differ by 1% or more (returned then, NULL otherwise), for the log and `newsletter status`.
RECORD_EMAIL_COUNT = """
    WITH old AS (SELECT email_count FROM emails WHERE id = $1),
    drift AS (SELECT email_count AS expected FROM old
              WHERE email_count > 0 AND abs($2::int - email_count) * 100 >= email_count)
    UPDATE emails e SET email_count = $2, updated_at = now(),
           email_count_expected = coalesce((SELECT expected FROM drift), e.email_count_expected)
    WHERE e.id = $1 RETURNING (SELECT expected FROM drift)
"""


CHUNK_BATCHES = 10  # batches per chunk of a chunked creation: the first go out while the next are written
SEGMENT_NAMES = {FREE: "free", NOT_FREE: "paid", FREE_OF_TIER: "free-tiers",  # in batch ids; an unsegmented
                 NOT_FREE_OF_TIER: "paid-tiers"}  # email's batches say "all"
# A batch id's segment part, in SQL, from a `segment` column (names from SEGMENT_NAMES only, never input).
SEGMENT_NAME_SQL = ("CASE segment " + " ".join(f"WHEN '{s}' THEN '{n}'" for s, n in SEGMENT_NAMES.items())
                    + " ELSE 'all' END")


def audience_of(email: asyncpg.Record, *, as_of: datetime, segments: tuple[str | None, ...]) -> Audience:
    """The email's audience, its tiers judged at `as_of`; a filter that cannot be parsed is refused
    (the lock refuses it first; this is for an email changed since)."""
    try:
        return audience(email, as_of=as_of, tiers=any(s is not None and s not in (FREE, NOT_FREE) for s in segments))
    except FilterError as error:
        raise non_retryable("BadRecipientFilter", str(error)) from None


class BatchCreationActivities:
    def __init__(self, deps: Dependencies) -> None:
        self.pool = deps.pool
        self.settings = deps.settings
        self.provider = deps.provider

    @activity.defn
    async def create_batches(self, input: CreateBatchesInput) -> BatchCounts:
        """Every recipient in exactly one batch; existing batches are reused. Written in one
        transaction, or chunked: one chunk per call, each in its own (see `_create_chunk`)."""
        # A chunk is usually written within the first wait: it then costs the engine no heartbeat
        # request (the send's heartbeat timeout is 5 s at the shortest; a long chunk or plan still beats).
        async with heartbeating(first_after=FIRST_HEARTBEAT_SECONDS), self.pool.acquire() as conn, \
                conn.transaction():
            email = await conn.fetchrow(
                "SELECT newsletter_id, post_id, recipient_filter, created_at FROM emails WHERE id = $1 FOR UPDATE",
                input.email_id)
            if email is None:
                raise non_retryable("EmailNotFound", f"email {input.email_id} does not exist")
            has_batches = await conn.fetchval("SELECT EXISTS (SELECT 1 FROM email_batches WHERE email_id = $1)",
                                              input.email_id)
            creation = await conn.fetchrow("SELECT * FROM email_batch_creation WHERE email_id = $1", input.email_id)
            if creation is not None or (input.chunked and not has_batches):
                return await self._create_chunk(conn, input, email, creation)
            if has_batches:
                if input.retry_failed:
                    await self._retry_failed_batches(conn, input.email_id)
            else:
                activity.logger.info("creating batches for email %s", input.email_id)
                segments = segments_of((await load_for_sending(conn, input.email_id, self.settings)).content)
                as_of = await conn.fetchval("SELECT now()")
                chosen = audience_of(email, as_of=as_of, segments=segments)
                await self._leave_out_unusable(conn, input.email_id, chosen)
                custom_limit = await self._warmup_limit(conn) if self.settings.warming else None
                sizes = await batch_sizes(conn, self.settings, self.provider)
                # Domain warming: the first `custom_limit` recipients, most engaged first (a new
                # domain's reputation grows on opens), go through the custom domain, the rest
                # through the fallback one, in batches of their own.
                await conn.execute(chosen.sql(f"""
                    WITH chosen AS (
                        SELECT m.id, m.uuid, m.email, m.name, m.email_open_rate,
                               CASE WHEN $5 THEN {SEGMENT} END AS segment
                        {RECIPIENTS} {NOT_SKIPPED.format(param=4)}),
                    ranked AS (
                        SELECT chosen.*, coalesce(row_number() OVER (ORDER BY email_open_rate DESC NULLS LAST, id)
                                                  > $7::int, false) AS fallback
                        FROM chosen),
                    numbered AS (
                        SELECT ranked.*,
                               $4 || '-' || {SEGMENT_NAME_SQL}
                                  || CASE WHEN fallback THEN '-fallback' ELSE '' END
                                  || '-' || lpad(((row_number() OVER (PARTITION BY segment, fallback ORDER BY id) - 1)
                                                  / CASE WHEN fallback THEN $8::int ELSE $6::int END)::text, 5, '0')
                                  AS batch_id
                        FROM ranked),
                    batches AS (
                        INSERT INTO email_batches (id, email_id, member_segment, fallback_sending_domain)
                        SELECT DISTINCT batch_id, $4, segment, fallback FROM numbered)
                    INSERT INTO email_recipients (email_id, member_id, batch_id, member_uuid, member_email, member_name)
                    SELECT $4, id, batch_id, uuid, email, name FROM numbered"""),
                    *chosen.params, input.email_id, segments != (None,), sizes[False], custom_limit, sizes[True])
            return await self._record_written(conn, input.email_id, created=not has_batches, email=email,
                                              as_of=None if has_batches else as_of)

    async def _retry_failed_batches(self, conn: asyncpg.Connection, email_id: str) -> None:
        """A new send of a failed email sends its failed batches again. The send outcome stays: an
        uncertain batch is looked up before it is sent again."""
        await conn.execute("UPDATE email_batches SET status = 'pending', send_attempts = 0, error_status_code = NULL, "
                           "error_message = NULL, updated_at = now() WHERE email_id = $1 AND status = 'failed'",
                           email_id)

    async def _record_written(self, conn: asyncpg.Connection, email_id: str, *, created: bool, email: asyncpg.Record,
                              as_of: datetime | None) -> BatchCounts:
        """The email's counts from the rows really written, not the ones planned, so reports match
        the send; a creation just finished also records who was left out and why (tiers judged at
        `as_of`, when its audience was taken), and with warming how many go through the custom domain."""
        if created and as_of is not None:  # a creation just finished has its audience's time
            await record_left_out(conn, email_id, email, as_of=as_of)
        if created and self.settings.warming:
            await conn.execute(
                """UPDATE emails SET csd_email_count = (
                       SELECT count(*) FROM email_recipients r JOIN email_batches b ON b.id = r.batch_id
                       WHERE r.email_id = $1 AND NOT b.fallback_sending_domain) WHERE id = $1""", email_id)
        counts = await batch_counts(conn, email_id)
        expected = await conn.fetchval(RECORD_EMAIL_COUNT, email_id, counts.recipients_total)
        if expected is not None:
            activity.logger.warning("email %s: %d recipients written, not the %d the site counted (%+.1f%%); "
                                    "email_count corrected", email_id, counts.recipients_total, expected,
                                    100 * (counts.recipients_total - expected) / expected)
        return counts

    async def _create_chunk(self, conn: asyncpg.Connection, input: CreateBatchesInput, email: asyncpg.Record,
                            creation: asyncpg.Record | None) -> BatchCounts:
        """Plan the creation on the first call, then write the next chunk (chunked) or every chunk
        left; the totals are the planned ones until the call after the last chunk."""
        if creation is None:
            creation = await self._plan_creation(conn, input.email_id, email)
        elif input.retry_failed:
            await self._retry_failed_batches(conn, input.email_id)
        wrote = False
        while not creation["done"]:
            creation = await self._write_chunk(conn, input.email_id, email, creation)
            wrote = True
            if input.chunked:
                break
        # The last chunk is committed and answered at once, so that its batches go out while the next
        # call records who was left out and the counts (they wait for no batch).
        if not creation["done"] or (input.chunked and wrote):
            return BatchCounts(batches_total=creation["planned_batches"], batches_submitted=0, batches_failed=0,
                               recipients_total=creation["planned_recipients"], recipients_submitted=0,
                               creating=True)
        return await self._record_written(conn, input.email_id, created=True, email=email,
                                          as_of=creation["audience_at"])

    async def _plan_creation(self, conn: asyncpg.Connection, email_id: str, email: asyncpg.Record) -> asyncpg.Record:
        """Fix what every chunk must agree on: segments, batch sizes, where warming falls back; and
        count the audience per group for the planned totals (from the same pass that finds the
        unusable addresses, unless warming sends some of it through the fallback domain)."""
        activity.logger.info("creating batches for email %s in chunks", email_id)
        segments = segments_of((await load_for_sending(conn, email_id, self.settings)).content)
        as_of = await conn.fetchval("SELECT now()")
        chosen = audience_of(email, as_of=as_of, segments=segments)
        usable = await self._leave_out_unusable(conn, email_id, chosen)
        segmented = segments != (None,)
        custom_limit = await self._warmup_limit(conn) if self.settings.warming else None
        sizes = await batch_sizes(conn, self.settings, self.provider)
        rate, first_id = None, None
        planned: list[Any] = [{"segment": segment, "fallback": False, "n": n} for segment, n in usable.items()]
        if custom_limit is not None and sum(usable.values()) > custom_limit:
            # Domain warming: the first `custom_limit` recipients, most engaged first (a new
            # domain's reputation grows on opens), go through the custom domain, the rest through
            # the fallback one, in batches of their own.
            row = await conn.fetchrow(chosen.sql(f"SELECT {RANK_KEY} AS rate, m.id {RECIPIENTS} "
                                                 f"{NOT_SKIPPED.format(param=5)} ORDER BY m.email_open_rate "
                                                 "DESC NULLS LAST, m.id OFFSET $4 LIMIT 1"),
                                      *chosen.params, custom_limit, email_id)
            if row is not None:
                rate, first_id = row["rate"], row["id"]
                planned = await conn.fetch(chosen.sql(
                    f"""SELECT {SEGMENT} AS segment, {falls_back('$4', '$5')} AS fallback, count(*) AS n
                        {RECIPIENTS} {NOT_SKIPPED.format(param=6)} GROUP BY 1, 2"""),
                    *chosen.params, rate, first_id, email_id)
        batches = sum(-(-row["n"] // sizes[row["fallback"]]) for row in planned) if segmented else sum(
            -(-sum(row["n"] for row in planned if row["fallback"] == fallback) // sizes[fallback])
            for fallback in (False, True))
        return await conn.fetchrow(
            """INSERT INTO email_batch_creation (email_id, segmented, batch_size, fallback_batch_size,
                   fallback_from_rate, fallback_from_id, planned_batches, planned_recipients, segments, audience_at)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING *""",
            email_id, segmented, sizes[False], sizes[True], rate, first_id, batches,
            sum(row["n"] for row in planned), list(segments) if segmented else None, as_of)

    async def _leave_out_unusable(self, conn: asyncpg.Connection, email_id: str, chosen: Audience) -> dict[str, int]:
        """Record the members whose stored address cannot be a recipient as left out of the email, by
        id and reason, and count them on it, in the caller's transaction (with the plan, so every
        chunk leaves out the same members); one bad row never fails the batch it would have joined.
        Returns how many members are left, by segment."""
        segments = await conn.fetch(chosen.sql(AUDIENCE_BY_SEGMENT), *chosen.params, PLAIN_ADDRESS,
                                    list(SPECIAL_USE_DOMAINS), PLAIN_DOMAIN_LENGTH)
        unplain = [member for segment in segments for member in segment["unplain"]]
        rows = await conn.fetch("SELECT id, email FROM members WHERE id = ANY($1::text[])", unplain) if unplain else []
        skipped = [(row["id"], problem) for row in rows if (problem := recipient_problem(row["email"])) is not None]
        if skipped:
            await conn.execute(
                "INSERT INTO email_skipped_recipients (email_id, member_id, reason) "
                "SELECT $1, id, reason FROM unnest($2::text[], $3::text[]) AS s (id, reason) ON CONFLICT DO NOTHING",
                email_id, [member for member, _ in skipped], [reason for _, reason in skipped])
            shown = "; ".join(f"member {member} {reason}" for member, reason in skipped[:SKIPPED_SHOWN])
            more = f"; and {len(skipped) - SKIPPED_SHOWN} more" if len(skipped) > SKIPPED_SHOWN else ""
            activity.logger.warning("email %s: %d members left out, their address cannot be a recipient: %s%s",
                                    email_id, len(skipped), shown, more)
        await conn.execute("UPDATE emails SET skipped_recipients = (SELECT count(*) FROM email_skipped_recipients "
                           "WHERE email_id = $1) WHERE id = $1", email_id)
        left_out = {member for member, _ in skipped}
        return {segment["segment"]: segment["n"] - len(left_out.intersection(segment["unplain"]))
                for segment in segments}

    async def _write_chunk(self, conn: asyncpg.Connection, email_id: str, email: asyncpg.Record,
                           creation: asyncpg.Record) -> asyncpg.Record:
        """The next chunk of the current group's recipients in member id order, as whole batches,
        and the cursor moved past it, in the caller's transaction; an exhausted group moves the
        cursor to the next one."""
        segments = creation_segments(creation)
        groups = creation_groups(segments, creation["fallback_from_id"] is not None)
        segment, fallback = groups[creation["group_index"]]
        size = creation["fallback_batch_size"] if fallback else creation["batch_size"]
        limit = CHUNK_BATCHES * size
        prefix = f"{email_id}-{SEGMENT_NAMES.get(segment, 'all')}{'-fallback' if fallback else ''}"
        # The bound on both sides of the join, so that neither index is read from its start.
        bound = "AND m.id > $8::text AND mn.member_id > $8::text" if creation["after_member_id"] is not None \
            else "AND $8::text IS NULL"
        chosen = audience_of(email, as_of=creation["audience_at"], segments=segments)
        written = await conn.fetchrow(
            chosen.sql(WRITE_CHUNK.format(after=bound)), *chosen.params, segment, creation["fallback_from_rate"],
            creation["fallback_from_id"], fallback, creation["after_member_id"], limit, prefix,
            creation["written_in_group"] // size, size, email_id)
        if written["n"] < limit:  # the group is exhausted: the next chunk starts the next group
            group, after, in_group = creation["group_index"] + 1, None, 0
        else:
            group, after, in_group = creation["group_index"], written["last"], creation["written_in_group"] + limit
        return await conn.fetchrow(
            """UPDATE email_batch_creation SET group_index = $2, after_member_id = $3, written_in_group = $4,
                      done = $5, updated_at = now()
               WHERE email_id = $1 RETURNING *""", email_id, group, after, in_group, group >= len(groups))

    async def _warmup_limit(self, conn: asyncpg.Connection) -> int | None:
        """Today's warm-up limit, counting days from the first email sent with warming."""
        day = await conn.fetchval(
            """SELECT coalesce(floor(extract(epoch FROM now() - min(b.created_at)) / 86400), 0)::int
               FROM email_batches b JOIN emails e ON e.id = b.email_id WHERE e.csd_email_count IS NOT NULL""")
        limit = warmup_limit(day)
        activity.logger.info("domain warming day %d: %s recipients through %s", day,
                             "all" if limit is None else limit, sending_scope(self.settings))
        return limit

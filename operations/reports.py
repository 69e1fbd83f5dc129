"""How an email did: its recipients and what became of them, who was left out and why, its opens
over time. Every figure is one set-based statement over that email's rows (indexes in schema 0016);
what would take comparing every member with every recipient was recorded when it happened (schema
0029): who was left out, by reason, when the batches were written; who left the newsletter through
the email as they did (members_subscribe_events); its first and last open by the analytics
recount. An email whose batches were written before 0029 is counted as it was then.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from datetime import UTC, datetime

from activities.newsletter.batches import SEGMENT_NAMES
from activities.newsletter.left_out import (
    LEFT_OUT_JOINS,
    LEFT_OUT_REASON,
    LEFT_OUT_REASONS,
    with_filter,
)
from activities.report_figures import beside_recipients
from operations.answers import EmailReport, EmailRow, LeftOutRow, Page
from operations.clicks import click_rate, clicked_by_post, email_clicks
from operations.finding import LARGEST_PAGE, SHOWN_ERROR, SHOWN_STATUS
from pressroom import database
from pressroom.errors import BadInput, NotFound
from pressroom.inputs import entity_id
from pressroom.settings import Settings, get_settings
from pressroom.store.reports import RECIPIENT_COUNTS as _RECIPIENTS
from pressroom.store.reports import opens_chart as _opens
from pressroom.store.retention import FOLDED_FIGURES, folded_figures

# Delivered and opened as analytics last aggregated them, whether the email was sent by segment,
# and its complaints: one round trip.
_EMAIL_COUNTS = """
SELECT e.delivered_count AS delivered, e.opened_count AS opened,
       EXISTS (SELECT 1 FROM email_batches b WHERE b.email_id = e.id AND b.member_segment IS NOT NULL) AS segmented,
       (SELECT count(*) FROM email_spam_complaint_events c WHERE c.email_id = e.id) AS complained
FROM emails e WHERE e.id = $1"""
# An open or delivery applied since the last recount: delivered and opened read from the same rows as
# the opens chart, so the figures above the chart never disagree with its bars.
_COUNTS_FROM_ROWS = """
SELECT count(delivered_at) AS delivered, count(opened_at) AS opened FROM email_recipients WHERE email_id = $1"""

# What tells that an email's recipient rows are as they were: its batches, all written (no chunked
# creation under way) and all submitted (then no recipient is added or removed: a deleted member
# leaves only unsent batches), and for its opens
# the analytics recount's last write (`updated_at`) with no change applied since (an applied open
# marks the email dirty in the same statement, until the next recount).
_STILL = """
SELECT e.created_at, e.updated_at,
       (SELECT count(*) FROM email_batches b WHERE b.email_id = e.id) AS batches,
       (SELECT count(*) FROM email_batches b WHERE b.email_id = e.id AND b.status = 'submitted') AS submitted,
       EXISTS (SELECT 1 FROM email_batch_creation c WHERE c.email_id = e.id) AS creating,
       EXISTS (SELECT 1 FROM email_analytics_dirty_emails d WHERE d.email_id = e.id) AS dirty
FROM emails e WHERE e.id = $1"""

# Who left the newsletter through this email (its link, or the provider's unsubscribe event for it), by source.
_LEFT_THROUGH = """
SELECT source, count(DISTINCT member_id) AS n FROM members_subscribe_events
WHERE email_id = $1 AND NOT subscribed GROUP BY source"""


# The failures by severity and the reasons they failed for, most frequent first, in one pass over
# the email's failures; an address in a provider's message is replaced so that one reason groups
# and no address is shown.
_FAILURES = """
WITH reason AS (
    SELECT severity, code, enhanced_code,
           CASE WHEN strpos(message, '@') > 0
                THEN regexp_replace(message, '[^\\s<>"'']+@[^\\s<>"'']+', '<address>', 'g') ELSE message END AS message,
           count(*) AS n
    FROM email_recipient_failures WHERE email_id = $1 GROUP BY 1, 2, 3, 4)
SELECT coalesce((SELECT json_object_agg(severity, n) FROM (SELECT severity, sum(n) AS n FROM reason GROUP BY 1) s),
                '{}') AS by_severity,
       coalesce((SELECT json_agg(top) FROM (SELECT * FROM reason ORDER BY n DESC, severity, code LIMIT $2) top),
                '[]') AS top"""


# The members left out of an email, with why (activities/newsletter/left_out.py): members as they
# are now (the report's counts are those recorded when the batches were written, and counted here
# only for an email written before 0029).
_LEFT_OUT_FROM = f"""
FROM members m
{LEFT_OUT_JOINS}
WHERE m.created_at <= $3
  AND NOT EXISTS (SELECT 1 FROM email_recipients er WHERE er.email_id = $1 AND er.member_id = m.id)"""
LEFT_OUT_PAGE = f"""
SELECT m.id AS member_id, m.email, m.name, m.status, {LEFT_OUT_REASON} AS reason, s.email_id AS suppressed_by,
       m.created_at
{_LEFT_OUT_FROM}
  AND ($5::text IS NULL OR {LEFT_OUT_REASON} = $5)
  AND ($6::timestamptz IS NULL OR (m.created_at, m.id) < ($6, $7::text))
ORDER BY m.created_at DESC, m.id DESC LIMIT $8"""

def segment_name(segment: str | None) -> str:
    """As batch ids name it: free, paid, free-tiers, paid-tiers (of a tiers post's tiers), or all."""
    return SEGMENT_NAMES.get(segment or "", segment or "all")


def _rate(part: int, whole: int, digits: int = 1) -> float | None:
    return round(100.0 * part / whole, digits) if whole else None


async def _email(conn, email_id: str):
    entity_id(email_id, "email")
    email = await conn.fetchrow(
        f"SELECT e.id, e.subject, {SHOWN_STATUS} AS status, {SHOWN_ERROR} AS error, e.post_id, e.newsletter_id, "
        "n.slug AS newsletter, "
        "e.recipient_filter, "
        "e.created_at, e.submitted_at, e.left_out, e.first_opened_at, e.last_opened_at, e.cancelled_by, e.cancelled_at "
        "FROM emails e LEFT JOIN newsletters n ON n.id = e.newsletter_id WHERE e.id = $1", email_id)
    if email is None:
        raise NotFound(f"email {email_id} does not exist (`pressroom newsletter list` shows the emails)")
    return email


# An email's whole-recipient figures (a pass over up to a million rows each) kept by the process
# that read them, for as long as `_STILL` says the rows are unchanged: the dashboard's server
# reads an email's report again and again. Bounded: the oldest email goes first.
_MEMO: OrderedDict[tuple[str, str, str], tuple[tuple, dict]] = OrderedDict()
_MEMO_SIZE = 512


def _remembered(key: tuple[str, str, str], still: tuple) -> dict | None:
    kept = _MEMO.get(key)
    if kept is None or kept[0] != still:
        return None
    _MEMO.move_to_end(key)
    return kept[1]


def _remember(key: tuple[str, str, str], still: tuple, value: dict) -> None:
    _MEMO[key] = (still, value)
    _MEMO.move_to_end(key)
    while len(_MEMO) > _MEMO_SIZE:
        _MEMO.popitem(last=False)


async def _recipients(conn, database: str, email_id: str, before) -> dict:
    """Recipients and those not sent: counted, or as counted before once every batch was submitted."""
    done = before["batches"] > 0 and before["submitted"] == before["batches"] and not before["creating"]
    still = (before["created_at"], before["batches"])
    key = (database, email_id, "recipients")
    if done and (kept := _remembered(key, still)) is not None:
        return kept
    counted = dict(await conn.fetchrow(_RECIPIENTS, email_id))
    if done and await conn.fetchrow(_STILL, email_id) == before:
        _remember(key, still, counted)
    return counted


async def _opens_memoised(conn, database: str, email, before) -> dict:
    """`_opens`, or as it was read since the last recount when no open was applied after it."""
    still = (before["created_at"], before["updated_at"], before["batches"], before["submitted"],
             email["first_opened_at"], email["last_opened_at"])
    key = (database, email["id"], "opens")
    if not before["dirty"] and (kept := _remembered(key, still)) is not None:
        return kept
    opens = await _opens(conn, email)
    if not before["dirty"] and await conn.fetchrow(_STILL, email["id"]) == before:
        _remember(key, still, opens)
    return opens


async def _row_figures(conn, database_url: str, email, before, *, segmented: bool) -> dict:
    """The figures that read the recipient rows: as the retention fold recorded them once the rows
    went (or began to go), else read from the rows."""
    folded = await conn.fetchrow(FOLDED_FIGURES, email["id"])
    if folded is not None:
        return folded_figures(folded)
    figures = await _recipients(conn, database_url, email["id"], before)
    figures.update(await beside_recipients(conn, email, segmented=segmented))
    figures["opens"] = await _opens_memoised(conn, database_url, email, before)
    if before["dirty"]:  # an applied event awaits the recount: delivered and opened from the chart's rows
        figures.update(await conn.fetchrow(_COUNTS_FROM_ROWS, email["id"]))
    return figures


async def newsletter_report(email_id: str, *, reasons: int = 5, settings: Settings | None = None) -> EmailReport:
    """Recipients, delivered, opened, failed, unsubscribed, complained with rates (per segment too),
    the top failure reasons, who was left out and why, the opens over time, and the clicks."""
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        email = await _email(conn, email_id)
        before = await conn.fetchrow(_STILL, email_id)
        figures = dict(await conn.fetchrow(_EMAIL_COUNTS, email_id))
        rows = await _row_figures(conn, settings.require_database(), email, before, segmented=figures["segmented"])
        figures.update({key: rows[key] for key in ("recipients", "not_sent", "unsubscribed", "delivered", "opened")
                        if key in rows})
        segments, left_out, opens = rows["segments"], rows["left_out"], rows["opens"]
        left_through = {r["source"]: r["n"] for r in await conn.fetch(_LEFT_THROUGH, email_id)}
        failed = await conn.fetchrow(_FAILURES, email_id, reasons)
        failures, top = json.loads(failed["by_severity"]), json.loads(failed["top"])
        complained = figures["complained"]
        clicks = await email_clicks(conn, email["post_id"], figures["delivered"])
    permanent, temporary = failures.get("permanent", 0), failures.get("temporary", 0)
    figures = {"recipients": figures["recipients"], "sent": figures["recipients"] - figures["not_sent"],
               "delivered": figures["delivered"], "opened": figures["opened"],
               "unsubscribed": figures["unsubscribed"],
               "unsubscribed_through_email": {source: left_through.get(source, 0) for source in ("link", "provider")},
               "failed": permanent + temporary,
               "failed_permanent": permanent, "failed_temporary": temporary, "complained": complained}
    # Rates are over the recipients the provider accepted: a cancelled or failed email's report does not
    # count the recipients it never sent to as not delivered nor not opened.
    whole = figures["sent"]
    return EmailReport.model_validate({
            "email_id": email["id"], "subject": email["subject"], "status": email["status"], "error": email["error"],
            "post_id": email["post_id"], "newsletter_id": email["newsletter_id"], "newsletter": email["newsletter"],
            "recipient_filter": email["recipient_filter"], "created_at": email["created_at"],
            "submitted_at": email["submitted_at"], "cancelled_by": email["cancelled_by"],
            "cancelled_at": email["cancelled_at"],
            **figures,
            "rates": {key: _rate(figures[key], whole) for key in ("delivered", "opened", "failed", "unsubscribed",
                                                                  "complained")},
            "segments": [{**s, "segment": segment_name(s["segment"]),
                          "rates": {k: _rate(s[k], s["sent"]) for k in ("delivered", "opened")}}
                         for s in segments],
            # As mailbox providers count them: hard bounces over sent, complaints over delivered.
            "reputation": {"hard_bounce_rate": _rate(permanent, figures["sent"], 2),
                           "complaint_rate": _rate(complained, figures["delivered"], 2)},
            "top_failures": top,
            "left_out": {reason: left_out.get(reason, 0) for reason in LEFT_OUT_REASONS},
            "opens_over_time": opens,
            "clicks": clicks.model_dump()})


async def left_out_members(email_id: str, *, reason: str | None = None, after: str | None = None, limit: int = 50,
                           settings: Settings | None = None) -> Page[LeftOutRow]:
    """The members left out of an email, newest first, with why: `{items, next_after}` as every list."""
    if reason is not None and reason not in LEFT_OUT_REASONS:
        raise BadInput(f"--reason {reason!r} is not one of {', '.join(LEFT_OUT_REASONS)}")
    if not 1 <= limit <= LARGEST_PAGE:
        raise BadInput(f"--limit {limit} is not between 1 and {LARGEST_PAGE}")
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        email = await _email(conn, email_id)
        if await conn.fetchval("SELECT EXISTS (SELECT 1 FROM email_figures_folded WHERE email_id = $1)", email_id):
            raise BadInput(f"email {email_id} is older than the retention period (PRESSROOM_RECIPIENT_RETENTION_DAYS): "
                           "its recipients are no longer kept, only its counts by reason (`pressroom newsletter "
                           f"report {email_id}`)")
        cursor = None, None
        if after is not None:
            entity_id(after, "member")
            cursor = await conn.fetchrow("SELECT created_at, id FROM members WHERE id = $1", after) or (None, None)
            if cursor[0] is None:
                raise NotFound(f"--after {after}: no member has that id")
        page, values = with_filter(LEFT_OUT_PAGE, email, as_of=datetime.now(UTC))  # tiers as they are now
        rows = await conn.fetch(page, email_id, email["newsletter_id"], email["created_at"],
                                values, reason, *cursor, limit + 1)
    items = [LeftOutRow.model_validate(dict(row)) for row in rows[:limit]]
    return Page[LeftOutRow](items=items, next_after=items[-1].member_id if len(rows) > limit else None)


_NOT_SENT = """
SELECT email_id, sum(n)::bigint AS n FROM (
    SELECT b.email_id, count(*) AS n FROM email_batches b JOIN email_recipients er ON er.batch_id = b.id
    WHERE b.email_id = ANY($1::text[]) AND b.status <> 'submitted'
      AND NOT EXISTS (SELECT 1 FROM email_figures_folded f WHERE f.email_id = b.email_id)
    GROUP BY b.email_id
    UNION ALL  -- an email whose rows the retention fold dropped, as it counted them
    SELECT email_id, not_sent FROM email_figures_folded WHERE email_id = ANY($1::text[])) counted
GROUP BY email_id"""


async def click_rates(rows: list[EmailRow], *, settings: Settings | None = None) -> dict[str, float | None]:
    """The report's click rate (members who clicked over delivered), per email, for a page of emails."""
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        clicked = await clicked_by_post(conn, [row.post_id for row in rows if row.post_id])
    return {row.email_id: click_rate(clicked.get(row.post_id or "", 0), row.delivered) for row in rows}


async def sent_counts(email_ids: list[str], *, settings: Settings | None = None) -> dict[str, int]:
    """Recipients accepted by the provider, per email (the report's `sent`), for a page of emails:
    the email's recipients less those of its batches not accepted, which alone are counted."""
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        recipients = {r["id"]: r["email_count"] for r in await conn.fetch(
            "SELECT id, email_count FROM emails WHERE id = ANY($1::text[])", email_ids)}
        not_sent = {r["email_id"]: r["n"] for r in await conn.fetch(_NOT_SENT, email_ids)}
    return {email_id: recipients.get(email_id, 0) - not_sent.get(email_id, 0) for email_id in email_ids}

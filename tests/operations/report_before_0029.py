"""The oracle: `newsletter report` as it was computed before schema 0029, from the rows as they are
now (anti-joins over every member and recipient, the opens' range read from the rows). Kept as it
was, so that a test can compare the report that reads recorded figures with it on the same data,
and bench/reads.py can time the two in alternation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pressroom.errors import NotFound
from pressroom.inputs import entity_id
from pressroom.settings import Settings, get_settings

# The figures of the whole email: recipients counted from the email's own index entries; delivered
# and opened as analytics last aggregated them (the figures `newsletter list` shows); recipients of
# batches not (yet) accepted, from those batches alone.
_FIGURES = """
SELECT (SELECT count(*) FROM email_recipients WHERE email_id = $1) AS recipients,
       (SELECT count(*) FROM email_recipients er JOIN email_batches b ON b.id = er.batch_id
        WHERE b.email_id = $1 AND b.status <> 'submitted') AS not_sent,
       e.delivered_count AS delivered, e.opened_count AS opened
FROM emails e WHERE e.id = $1"""

# Recipients no longer subscribed to the email's newsletter (Mailgun's unsubscribe events remove
# the subscription; when they left is not kept): both sides read in member order from their indexes.
_UNSUBSCRIBED = """
SELECT count(*) FROM email_recipients er
WHERE er.email_id = $1
  AND NOT EXISTS (SELECT 1 FROM members_newsletters mn WHERE mn.newsletter_id = $2 AND mn.member_id = er.member_id)"""

# Who left the newsletter through this email (its link, or the provider's unsubscribe event for it), by source.
_LEFT_THROUGH = """
SELECT source, count(DISTINCT member_id) AS n FROM members_subscribe_events
WHERE email_id = $1 AND NOT subscribed GROUP BY source"""

_SEGMENTED = "SELECT EXISTS (SELECT 1 FROM email_batches WHERE email_id = $1 AND member_segment IS NOT NULL)"

# Per segment, for a segmented email only: recipients and what analytics recorded for each.
_OUTCOMES = """
SELECT b.member_segment AS segment, count(*) AS recipients,
       count(*) FILTER (WHERE b.status = 'submitted') AS sent,
       count(er.delivered_at) AS delivered, count(er.opened_at) AS opened,
       count(*) FILTER (WHERE mn.id IS NULL) AS unsubscribed
FROM email_recipients er
JOIN email_batches b ON b.id = er.batch_id
LEFT JOIN members_newsletters mn ON mn.member_id = er.member_id AND mn.newsletter_id = $2
WHERE er.email_id = $1
GROUP BY b.member_segment ORDER BY b.member_segment NULLS FIRST"""

_FAILURES = """
SELECT severity, count(*) AS n FROM email_recipient_failures WHERE email_id = $1 GROUP BY severity"""

# The reasons recipients failed, most frequent first; an address in a provider's message is
# replaced so that one reason groups and no address is shown.
_TOP_REASONS = """
SELECT severity, code, enhanced_code,
       regexp_replace(message, '[^\\s<>"'']+@[^\\s<>"'']+', '<address>', 'g') AS message, count(*) AS n
FROM email_recipient_failures WHERE email_id = $1
GROUP BY 1, 2, 3, 4 ORDER BY n DESC, severity, code LIMIT $2"""

_COMPLAINTS = "SELECT count(*) FROM email_spam_complaint_events WHERE email_id = $1"

# Why a member who existed when the email was made is not among its recipients: the first reason
# that applies, in the order the send's audience query excludes them. Members as they are now. $4 is
# the filter's values (named even when the filter reads none, so that its type is known).
LEFT_OUT_REASONS = ("suppressed-bounce", "suppressed-complaint", "disabled", "not-subscribed", "not-in-filter",
                    "unusable-address", "other")
_LEFT_OUT_REASON = """
CASE WHEN s.reason = 'bounce' THEN 'suppressed-bounce' WHEN s.reason = 'spam' THEN 'suppressed-complaint'
     WHEN m.email_disabled THEN 'disabled' WHEN mn.id IS NULL THEN 'not-subscribed'
     WHEN $4::text[] IS NOT NULL AND NOT (/* the recipient filter */ TRUE) THEN 'not-in-filter'
     WHEN x.member_id IS NOT NULL THEN 'unusable-address'
     ELSE 'other' END"""
# The counts start from the members missing from the recipients, both read in id order from their
# indexes alone; only those few rows are then read to say why.
_LEFT_OUT_COUNTS = f"""
WITH missing AS MATERIALIZED (
    SELECT m.id FROM members m
    WHERE NOT EXISTS (SELECT 1 FROM email_recipients er WHERE er.email_id = $1 AND er.member_id = m.id))
SELECT {_LEFT_OUT_REASON} AS reason, count(*) AS n
FROM missing JOIN members m ON m.id = missing.id
LEFT JOIN members_newsletters mn ON mn.member_id = m.id AND mn.newsletter_id = $2
LEFT JOIN suppressions s ON s.email = m.email
LEFT JOIN email_skipped_recipients x ON x.email_id = $1 AND x.member_id = m.id
WHERE m.created_at <= $3
GROUP BY 1"""

_OPENS_RANGE = ("SELECT min(opened_at), max(opened_at) FROM email_recipients "
                "WHERE email_id = $1 AND opened_at IS NOT NULL")
_OPENS = """
SELECT date_bin($2::interval, opened_at, $3) AS at, count(*) AS n
FROM email_recipients WHERE email_id = $1 AND opened_at IS NOT NULL GROUP BY 1 ORDER BY 1"""

# Bucket widths for the opens chart: the smallest that keeps it within CHART_BUCKETS rows.
CHART_BUCKETS = 24
_WIDTHS = [timedelta(seconds=s) for s in (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 86400,
                                          7 * 86400)]


def segment_name(segment: str | None) -> str:
    """As batch ids name it: free, paid, free-tiers, paid-tiers (of a tiers post's tiers), or all."""
    from activities.newsletter.batches import SEGMENT_NAMES

    return SEGMENT_NAMES.get(segment, segment or "all")


def _rate(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None


async def _email(conn, email_id: str):
    entity_id(email_id, "email")
    email = await conn.fetchrow(
        "SELECT e.id, e.subject, e.status, e.error, e.post_id, e.newsletter_id, n.slug AS newsletter, "
        "e.recipient_filter, "
        "e.created_at, e.submitted_at FROM emails e LEFT JOIN newsletters n ON n.id = e.newsletter_id "
        "WHERE e.id = $1", email_id)
    if email is None:
        raise NotFound(f"email {email_id} does not exist (`pressroom newsletter list` shows the emails)")
    return email


def _with_filter(statement: str, email) -> tuple[str, list[str]]:
    """The statement with the email's recipient filter as its not-in-filter test, reading its values
    from $4 (tiers as they are now); a filter that cannot be parsed leaves nobody out for it."""
    from activities.newsletter.audience import PREDICATE
    from pressroom.recipient_filter import FilterError
    from pressroom.store.audience import filter_sql

    try:
        predicate, values = filter_sql(email["recipient_filter"], as_of=datetime.now(UTC), post_id=email["post_id"],
                                       param=4)
    except FilterError:
        predicate, values = "TRUE", []
    return statement.replace(PREDICATE, predicate), values


async def _opens(conn, email_id: str) -> dict:
    first, last = await conn.fetchrow(_OPENS_RANGE, email_id)
    if first is None:
        return {"bucket_seconds": None, "buckets": []}
    width = next((w for w in _WIDTHS if (last - first) / w < CHART_BUCKETS), _WIDTHS[-1])
    counts = {r["at"]: r["n"] for r in await conn.fetch(_OPENS, email_id, width, first)}
    at, buckets = first, []
    while at <= last:  # every bucket, those without opens too: the chart's time axis is even
        buckets.append({"at": at, "opens": counts.get(at, 0)})
        at += width
    return {"bucket_seconds": int(width.total_seconds()), "buckets": buckets}


async def report_before_0029(email_id: str, *, reasons: int = 5, settings: Settings | None = None) -> dict:
    """Recipients, delivered, opened, failed, unsubscribed, complained with rates (per segment too),
    the top failure reasons, who was left out and why, and the opens over time."""
    from pressroom import database

    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        email = await _email(conn, email_id)
        figures = dict(await conn.fetchrow(_FIGURES, email_id))
        figures["unsubscribed"] = await conn.fetchval(_UNSUBSCRIBED, email_id, email["newsletter_id"])
        left_through = {r["source"]: r["n"] for r in await conn.fetch(_LEFT_THROUGH, email_id)}
        segments = ([dict(r) for r in await conn.fetch(_OUTCOMES, email_id, email["newsletter_id"])]
                    if await conn.fetchval(_SEGMENTED, email_id) else [])
        failures = {r["severity"]: r["n"] for r in await conn.fetch(_FAILURES, email_id)}
        top = [dict(r) for r in await conn.fetch(_TOP_REASONS, email_id, reasons)]
        complained = await conn.fetchval(_COMPLAINTS, email_id)
        counts, values = _with_filter(_LEFT_OUT_COUNTS, email)
        left_out = {r["reason"]: r["n"] for r in await conn.fetch(
            counts, email_id, email["newsletter_id"], email["created_at"], values)}
        opens = await _opens(conn, email_id)
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
    return {"email_id": email["id"], "subject": email["subject"], "status": email["status"], "error": email["error"],
            "post_id": email["post_id"], "newsletter_id": email["newsletter_id"], "newsletter": email["newsletter"],
            "recipient_filter": email["recipient_filter"], "created_at": email["created_at"],
            "submitted_at": email["submitted_at"],
            **figures,
            "rates": {key: _rate(figures[key], whole) for key in ("delivered", "opened", "failed", "unsubscribed",
                                                                  "complained")},
            "segments": [{**s, "segment": segment_name(s["segment"]),
                          "rates": {k: _rate(s[k], s["sent"]) for k in ("delivered", "opened")}}
                         for s in segments],
            "top_failures": top,
            "left_out": {reason: left_out.get(reason, 0) for reason in LEFT_OUT_REASONS},
            "opens_over_time": opens}

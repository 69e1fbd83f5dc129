"""Years of sends on one database: an email's recipient rows folded into per-email and per-member
figures once it is older than the retention period, then dropped a chunk at a time (schema 0091).

An email is due once it has ended (submitted, failed or cancelled) longer ago than
PRESSROOM_RECIPIENT_RETENTION_DAYS, no batch of it is under way or uncertain, and analytics has no
recount of it waiting. Its report's figures that read the rows are recorded first
(activities/report_figures.py); then each chunk of rows is folded into its members' figures and
deleted in one statement, so a member's figures (their rows plus what was folded of them) are the
same at every moment. Nothing here locks more than the chunk's own rows: a send writes and reads
other emails' rows.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import asyncpg

# $1 the retention period in days, $2 how many emails.
DUE_EMAILS = """
SELECT e.id FROM emails e
LEFT JOIN email_figures_folded f ON f.email_id = e.id
WHERE e.status IN ('submitted', 'failed', 'cancelled')
  AND coalesce(e.submitted_at, e.updated_at) < now() - make_interval(days => $1)
  AND f.dropped_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM email_batches b WHERE b.email_id = e.id
                  AND (b.status IN ('pending', 'submitting') OR b.send_outcome = 'uncertain'))
  AND NOT EXISTS (SELECT 1 FROM email_batch_creation c WHERE c.email_id = e.id AND NOT c.done)
  AND NOT EXISTS (SELECT 1 FROM email_analytics_dirty_emails d WHERE d.email_id = e.id)
ORDER BY coalesce(e.submitted_at, e.updated_at), e.id LIMIT $2"""

# The report's figures, recorded once: a fold interrupted between chunks keeps the first record.
RECORD_FIGURES = """
INSERT INTO email_figures_folded (email_id, recipients, not_sent, unsubscribed, segments, left_out, opens)
VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7::jsonb) ON CONFLICT (email_id) DO NOTHING"""

# One chunk of the email's rows ($1, at most $2, $3 whether the email tracked opens) folded into its
# members' figures and deleted, in one statement; the number of rows it took.
FOLD_CHUNK = """
WITH chunk AS (
    DELETE FROM email_recipients er
    WHERE er.id IN (SELECT id FROM email_recipients WHERE email_id = $1 LIMIT $2)
    RETURNING er.member_id, er.opened_at),
members AS (
    INSERT INTO member_figures_folded AS f (member_id, received, opened, tracked)
    SELECT member_id, count(*), count(opened_at), CASE WHEN $3 THEN count(*) ELSE 0 END
    FROM chunk GROUP BY member_id
    ON CONFLICT (member_id) DO UPDATE SET received = f.received + EXCLUDED.received,
        opened = f.opened + EXCLUDED.opened, tracked = f.tracked + EXCLUDED.tracked
    RETURNING 1)
SELECT count(*) FROM chunk"""

MARK_DROPPED = "UPDATE email_figures_folded SET dropped_at = now() WHERE email_id = $1"

FOLDED_FIGURES = """
SELECT recipients, not_sent, unsubscribed, segments, left_out, opens FROM email_figures_folded WHERE email_id = $1"""

# What `retention status` shows: emails folded and the rows that remain, with the table's size.
STATUS = """
SELECT (SELECT count(*) FROM email_figures_folded WHERE dropped_at IS NOT NULL) AS emails_folded,
       (SELECT count(*) FROM email_figures_folded WHERE dropped_at IS NULL) AS emails_folding,
       (SELECT max(dropped_at) FROM email_figures_folded) AS last_folded_at,
       (SELECT reltuples::bigint FROM pg_class WHERE oid = 'email_recipients'::regclass) AS rows_estimate,
       pg_table_size('email_recipients') AS table_bytes, pg_indexes_size('email_recipients') AS index_bytes"""


def _moment(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def figures_json(figures: dict) -> tuple[str, str | None, str]:
    """The segments, the left-out counts and the opens chart as jsonb takes them."""
    return (json.dumps(figures["segments"], default=_moment), json.dumps(figures["left_out"]),
            json.dumps(figures["opens"], default=_moment))


def folded_figures(row: asyncpg.Record) -> dict:
    """A folded email's figures as the report reads them from the rows."""
    return {"recipients": row["recipients"], "not_sent": row["not_sent"], "unsubscribed": row["unsubscribed"],
            "segments": json.loads(row["segments"]), "left_out": json.loads(row["left_out"] or "{}"),
            "opens": json.loads(row["opens"])}

"""An email's batches counted, as batch creation reports them and finishing records them."""

from __future__ import annotations

import asyncpg

from activities.newsletter.models import BatchCounts


async def batch_counts(conn: asyncpg.Connection, email_id: str) -> BatchCounts:
    """Batches and recipients by state; retired batches (split into pieces) are not counted."""
    row = await conn.fetchrow(
        """SELECT count(*) AS total,
                  count(*) FILTER (WHERE b.status = 'submitted') AS submitted,
                  count(*) FILTER (WHERE b.status = 'failed') AS failed,
                  count(*) FILTER (WHERE b.status = 'failed' AND b.send_outcome = 'uncertain') AS uncertain,
                  coalesce(sum(r.n), 0) AS recipients,
                  coalesce(sum(r.n) FILTER (WHERE b.status = 'submitted'), 0) AS recipients_submitted
           FROM email_batches b
           JOIN LATERAL (SELECT count(*) AS n FROM email_recipients WHERE batch_id = b.id) r ON true
           WHERE b.email_id = $1 AND b.status <> 'retired'""", email_id)
    return BatchCounts(batches_total=row["total"], batches_submitted=row["submitted"],
                       batches_failed=row["failed"], recipients_total=row["recipients"],
                       recipients_submitted=row["recipients_submitted"], batches_uncertain=row["uncertain"])

"""Rows still marked as being worked on whose run Temporal does not know (PostgreSQL restored beside
an empty Temporal): found, and handed back to their job (operations/restore.py)."""

from __future__ import annotations

# Emails a send had locked, unchanged for $1 seconds (a lock just taken belongs to a run starting). A
# send paused for its rates waits for an operator's word: it is left to the watchdog, which records it
# failed, and `newsletter send` sends the rest when the operator decides.
SENDS_UNDER_WAY = """
SELECT id, locked_by FROM emails
WHERE status = 'submitting' AND locked_by IS NOT NULL AND paused_at IS NULL
  AND updated_at < now() - make_interval(secs => $1)
ORDER BY updated_at, id LIMIT $2"""

# Every batch of the email not yet known to be submitted is looked up in the provider's events before
# it is sent: one written pending may have gone out after the backup that restored it, and a batch
# still `submitting` was uncertain already. The look-up window opens when the batch was written.
LOOK_UP_BEFORE_SENDING = """
UPDATE email_batches
SET send_outcome = 'uncertain', first_uncertain_at = coalesce(first_uncertain_at, created_at),
    last_uncertain_at = now(), updated_at = now()
WHERE email_id = $1 AND status = 'pending' AND send_outcome IS DISTINCT FROM 'uncertain'"""

# Entries a delivery run held (sending, or failed and waiting out its backoff), unchanged for $1 seconds.
DELIVERIES_UNDER_WAY = """
SELECT id, idempotency_key, status, updated_at FROM outbox
WHERE status IN ('sending', 'failed') AND updated_at < now() - make_interval(secs => $1)
ORDER BY updated_at, id LIMIT $2"""

# Back to the relay, as it was read (a run that took it meanwhile keeps it); its attempts are kept,
# and the ledger and an uncertain welcome's look-up still stand between it and a second send.
DELIVERY_BACK_TO_RELAY = """
UPDATE outbox SET status = 'pending', next_run_at = now(), updated_at = now()
WHERE id = $1 AND status = $2 AND updated_at = $3 RETURNING id"""

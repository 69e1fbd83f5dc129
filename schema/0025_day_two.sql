-- An operator may cancel an email's send (`pressroom newsletter cancel`): the send stops between
-- batches, the batches already accepted stay accepted and counted, and the email says who cancelled
-- it and when.
ALTER TABLE emails DROP CONSTRAINT emails_status_check;
ALTER TABLE emails ADD CONSTRAINT emails_status_check
    CHECK (status IN ('pending', 'submitting', 'submitted', 'failed', 'cancelled'));
ALTER TABLE emails ADD COLUMN cancelled_at timestamptz, ADD COLUMN cancelled_by text
    CHECK (length(cancelled_by) <= 200);

-- An aborted outbox entry runs no more: it keeps no future run time (requeueing it sets one).
UPDATE outbox SET next_run_at = least(next_run_at, coalesce(processed_at, updated_at))
WHERE status = 'aborted' AND next_run_at > coalesce(processed_at, updated_at);

-- An operator may cancel an email's send (`pressroom newsletter cancel`): the send stops between
-- batches, the batches already accepted stay accepted and counted, and the email says who cancelled
-- it and when.
ALTER TABLE emails DROP CONSTRAINT emails_status_check;
ALTER TABLE emails ADD CONSTRAINT emails_status_check
    CHECK (status IN ('pending', 'submitting', 'submitted', 'failed', 'cancelled'));
ALTER TABLE emails ADD COLUMN cancelled_at timestamptz, ADD COLUMN cancelled_by text
    CHECK (length(cancelled_by) <= 200);

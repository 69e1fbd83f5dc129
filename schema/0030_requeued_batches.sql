-- A provider that answers each recipient apart (SES) may refuse some of them only for the moment
-- (ACCOUNT_THROTTLED, TRANSIENT_FAILURE) in a call it otherwise accepted. Those recipients move to a
-- new batch of the same email, written with the accepted ones' record: the batch it came from,
-- its generation (the original is 0; a cap stops the chain), and how long the provider asked to
-- wait before it goes (taken once, on the workflow's timer, then cleared).
ALTER TABLE email_batches
    ADD COLUMN requeued_from text REFERENCES email_batches (id) ON DELETE CASCADE,
    ADD COLUMN requeue_generation smallint NOT NULL DEFAULT 0,
    ADD COLUMN hold_seconds real;
CREATE INDEX email_batches_requeued_from_idx ON email_batches (requeued_from) WHERE requeued_from IS NOT NULL;

-- What the last send attempt of a newsletter batch or a welcome email achieved: accepted,
-- certainly not accepted, or uncertain (it may be queued at Mailgun). An attempt is recorded as
-- uncertain before its request goes out, so a worker killed mid-send leaves "uncertain" behind;
-- every later path (retry, rerun, requeue) looks an uncertain send up before sending it again.
-- first_uncertain_at opens the events look-up window; last_uncertain_at starts the wait for
-- Mailgun's late events; send_attempts bounds how often an uncertain send is repeated.
ALTER TABLE email_batches
    ADD COLUMN send_outcome        text CHECK (send_outcome IN ('accepted', 'not_accepted', 'uncertain')),
    ADD COLUMN send_attempts       integer NOT NULL DEFAULT 0,
    ADD COLUMN first_uncertain_at  timestamptz,
    ADD COLUMN last_uncertain_at   timestamptz;

ALTER TABLE automated_email_recipients
    ADD COLUMN send_outcome        text CHECK (send_outcome IN ('accepted', 'not_accepted', 'uncertain')),
    ADD COLUMN send_attempts       integer NOT NULL DEFAULT 0,
    ADD COLUMN first_uncertain_at  timestamptz,
    ADD COLUMN last_uncertain_at   timestamptz;

-- Rows of 0.1.0 sends. A submitted batch or a recorded welcome email was accepted. A batch left
-- submitting, or failed without a certain refusal (no status, 5xx), may have reached Mailgun:
-- it is looked up (by its custom Message-Id, which 0.1.0 set) over its whole life.
UPDATE email_batches SET send_outcome = 'accepted' WHERE status = 'submitted';
UPDATE email_batches SET send_outcome = 'uncertain', first_uncertain_at = created_at, last_uncertain_at = updated_at
WHERE status = 'submitting' OR (status = 'failed' AND (error_status_code IS NULL OR error_status_code >= 500));
UPDATE automated_email_recipients SET send_outcome = 'accepted' WHERE provider_id IS NOT NULL;

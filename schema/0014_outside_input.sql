-- Members whose stored address cannot be a recipient (a comma, a line break, anything
-- email-validator refuses) are left out of an email when its batches are planned, so one bad row
-- never fails a batch. Who was left out and why is kept by member id (never the address), in the
-- same transaction as the plan, so every chunk of a resumed creation leaves out the same members.
CREATE TABLE email_skipped_recipients (
    email_id    text NOT NULL REFERENCES emails (id) ON DELETE CASCADE,
    member_id   text NOT NULL,
    reason      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (email_id, member_id)
);

ALTER TABLE emails ADD COLUMN skipped_recipients integer NOT NULL DEFAULT 0 CHECK (skipped_recipients >= 0);

-- `members import`: the reference platform's member note (its export's `note` column, up to 2,000
-- characters), and members found by their address whatever its case, as every command finds them:
-- the import matches each row of a file to a member this way, a chunk of rows at a time.
ALTER TABLE members ADD COLUMN note text CHECK (length(note) <= 2000);
CREATE INDEX members_email_lower_idx ON members (lower(email));
-- A welcome email that was not sent because there was nothing to send (the member deleted before
-- it, or no active welcome email for their status) is `skipped`, with why in last_error_code and
-- last_error_msg, where it used to read `succeeded`. NOT VALID, then validated: the outbox stays
-- writable while its rows are checked.
ALTER TABLE outbox DROP CONSTRAINT outbox_status_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_status_check
    CHECK (status IN ('pending', 'sending', 'succeeded', 'failed', 'aborted', 'completed', 'skipped')) NOT VALID;
ALTER TABLE outbox VALIDATE CONSTRAINT outbox_status_check;

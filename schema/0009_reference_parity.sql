-- Failure records: one row per recipient of an email, as Ghost keeps them. Rows written before
-- this migration (one per failure event) are reduced to the one that would have stood: the first
-- permanent failure, else the latest temporary one.
DELETE FROM email_recipient_failures f
USING (SELECT id, row_number() OVER (
              PARTITION BY email_recipient_id
              ORDER BY severity = 'permanent' DESC, CASE WHEN severity = 'permanent' THEN failed_at END,
                       failed_at DESC, event_id) AS rank
       FROM email_recipient_failures) ranked
WHERE f.id = ranked.id AND ranked.rank > 1;
DROP INDEX email_recipient_failures_recipient_idx;
ALTER TABLE email_recipient_failures
    ADD CONSTRAINT email_recipient_failures_recipient_key UNIQUE (email_recipient_id);

-- Outbox states take the worker protocol's names: an entry handed to its delivery workflow is
-- `sending` (it was `dispatched`). Workers of 0.1.0 still write `dispatched` during a rolling
-- deploy; the trigger stores what they write under the new name, so their rows stay valid.
ALTER TABLE outbox DROP CONSTRAINT outbox_status_check;
UPDATE outbox SET status = 'sending' WHERE status = 'dispatched';
ALTER TABLE outbox ADD CONSTRAINT outbox_status_check
    CHECK (status IN ('pending', 'sending', 'succeeded', 'failed', 'aborted', 'completed'));

CREATE FUNCTION outbox_status_dispatched_is_sending() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'dispatched' THEN
        NEW.status := 'sending';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER outbox_status_dispatched_is_sending BEFORE INSERT OR UPDATE OF status ON outbox
    FOR EACH ROW WHEN (NEW.status = 'dispatched') EXECUTE FUNCTION outbox_status_dispatched_is_sending();

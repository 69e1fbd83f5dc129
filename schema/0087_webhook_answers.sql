-- A target's answer to an attempt that was not delivered (its first characters, printable): for the
-- operator, beside the attempt, and nowhere else: never a failure message, a log line or a run's
-- history, where a member's name in it would outlive `members delete`. The event's member is
-- recorded so that `members delete` clears the answers of their events.
ALTER TABLE webhook_attempts ADD COLUMN member_id text,
    ADD COLUMN answer text CHECK (length(answer) <= 300);
CREATE INDEX webhook_attempts_member_idx ON webhook_attempts (member_id) WHERE member_id IS NOT NULL;

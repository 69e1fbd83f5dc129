-- When `members resubscribe` last lifted a member's suppressions. Events are read again (a later
-- window, the backfill, a push and a poll of the same event); one from before this moment must not
-- unsubscribe or suppress the member again.
ALTER TABLE members ADD COLUMN resubscribed_at timestamptz;

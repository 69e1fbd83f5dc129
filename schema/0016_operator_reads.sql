-- What the operator's lists and reports read without scanning a table: each list walks an index
-- newest first (created_at, id) and pages from the last row shown (keyset); an email's report
-- counts its failures, and charts its opens, from the rows of that email alone.
CREATE INDEX members_created_id_idx ON members (created_at DESC, id DESC);
CREATE INDEX emails_created_id_idx ON emails (created_at DESC, id DESC);
CREATE INDEX posts_created_id_idx ON posts (created_at DESC, id DESC);
CREATE INDEX outbox_created_id_idx ON outbox (created_at DESC, id DESC);
CREATE INDEX email_recipients_opened_idx ON email_recipients (email_id, opened_at) WHERE opened_at IS NOT NULL;
CREATE INDEX email_recipient_failures_email_idx ON email_recipient_failures (email_id, severity);
CREATE INDEX suppressions_email_id_idx ON suppressions (email_id);
-- `outbox list --member` and `outbox show MEMBER_ID`: a member's entries without reading every payload.
CREATE INDEX outbox_member_idx ON outbox ((payload->>'member_id')) WHERE payload ? 'member_id';

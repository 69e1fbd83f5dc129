-- Email analytics: the emails and members whose events were applied but whose
-- aggregates are not yet recomputed. Rows are written in the same transaction as the events,
-- so a crash between applying and aggregating loses nothing: the next aggregation picks them up.
CREATE TABLE email_analytics_dirty_emails (
    email_id text PRIMARY KEY
);

CREATE TABLE email_analytics_dirty_members (
    member_id text PRIMARY KEY
);

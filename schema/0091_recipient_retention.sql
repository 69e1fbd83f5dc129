-- Years of sends on one database: an email's per-recipient rows are folded into per-email and
-- per-member figures once the email is older than the retention period
-- (PRESSROOM_RECIPIENT_RETENTION_DAYS), then dropped a chunk at a time (pressroom/store/retention.py).
-- What the report, `newsletter list`, the dashboard and the Admin API read of such an email comes
-- from here; a member's figures are their remaining rows plus what was folded of them.
CREATE TABLE email_figures_folded (
    email_id      text PRIMARY KEY REFERENCES emails (id) ON DELETE CASCADE,
    recipients    integer NOT NULL,
    not_sent      integer NOT NULL,
    -- The report's figures that read the rows, as it read them at the fold: unsubscribed (for an
    -- email written before 0029), its segments, who was left out (before 0029) and the opens chart.
    unsubscribed  integer NOT NULL,
    segments      jsonb NOT NULL,
    left_out      jsonb,
    opens         jsonb NOT NULL,
    folded_at     timestamptz NOT NULL DEFAULT now(),
    dropped_at    timestamptz  -- every recipient row gone
);

-- No foreign key to members, as email_recipients: the record of a send outlives a deleted member.
CREATE TABLE member_figures_folded (
    member_id  text PRIMARY KEY,
    received   integer NOT NULL DEFAULT 0,
    opened     integer NOT NULL DEFAULT 0,
    tracked    integer NOT NULL DEFAULT 0
);

-- A failure stays when its recipient row goes: the report counts an email's failures by reason.
ALTER TABLE email_recipient_failures ALTER COLUMN email_recipient_id DROP NOT NULL,
    DROP CONSTRAINT email_recipient_failures_email_recipient_id_fkey,
    ADD CONSTRAINT email_recipient_failures_email_recipient_id_fkey FOREIGN KEY (email_recipient_id)
        REFERENCES email_recipients (id) ON DELETE SET NULL;

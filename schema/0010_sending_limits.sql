-- Domain warming: how many of an email's recipients went through the custom sending domain (the
-- rest through the fallback domain). NULL when warming was off for the email.
ALTER TABLE emails ADD COLUMN csd_email_count integer CHECK (csd_email_count >= 0);

-- A batch Mailgun refused for its number of recipients (or too large for the room left under a
-- send cap) is retired: its recipients move to smaller batches, each recipient in exactly one.
ALTER TABLE email_batches DROP CONSTRAINT email_batches_status_check;
ALTER TABLE email_batches ADD CONSTRAINT email_batches_status_check
    CHECK (status IN ('pending', 'submitting', 'submitted', 'failed', 'retired'));

-- The batch size each sending domain takes, learned from Mailgun's refusals; new batches of every
-- email start from it until an operator resets it (`pressroom limits reset DOMAIN`).
CREATE TABLE sending_domain_limits (
    domain        text PRIMARY KEY,
    batch_size    integer NOT NULL CHECK (batch_size >= 1),
    refused_size  integer CHECK (refused_size >= 1),  -- the smallest batch the domain refused
    reason        text,
    refused_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- Recipients reserved against a domain's hourly and daily send caps, one row per batch so that a
-- retried reservation counts once. Every worker and every email reserve here before sending.
CREATE TABLE sending_quota_reservations (
    batch_id     text PRIMARY KEY,
    domain       text NOT NULL,
    recipients   integer NOT NULL CHECK (recipients > 0),
    reserved_at  timestamptz NOT NULL
);
CREATE INDEX sending_quota_reservations_domain_idx ON sending_quota_reservations (domain, reserved_at);

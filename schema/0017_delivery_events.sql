-- Delivery events that cannot be applied (a NUL in the recipient, a code beyond int32, no id, a
-- field nested or huge, a value PostgreSQL refuses): set aside with their reason, once each (the
-- digest of the event's JSON text), so a polling cursor moves on and a re-read or a second
-- delivery of the same event is a no-op. `event` is the JSON text with NUL and lone surrogates
-- escaped, cut at 64 KiB; it holds the event's recipient, so it is read in the database only.
CREATE TABLE delivery_events_rejected (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider     text NOT NULL,
    source       text NOT NULL CHECK (source IN ('poll', 'push')),
    event_id     text,
    reason       text NOT NULL,
    event        text NOT NULL,
    digest       text NOT NULL,
    rejected_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (provider, digest)
);

-- A failure row is one per recipient (0009); its event id is a note of which event stands, not a
-- key: provider event ids are unique per provider and domain only, and the development simulator
-- starts its ids again after `dev down` / `dev up`, which made every later analytics run fail on
-- this constraint.
ALTER TABLE email_recipient_failures DROP CONSTRAINT IF EXISTS email_recipient_failures_event_id_key;

-- Pushed events (signed webhooks), stored raw before the receiver answers 200 and applied in
-- batches by WebhookInboxWorkflow, which deletes what it applied in the same transaction.
CREATE TABLE webhook_inbox (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider     text NOT NULL,
    kind         text NOT NULL,  -- the webhook's event name as the provider gave it (checked, short)
    event        text NOT NULL,  -- the event's JSON text (NUL and lone surrogates escaped)
    received_at  timestamptz NOT NULL DEFAULT now()
);

-- Webhook tokens already seen, until their timestamp is too old to be accepted anyway: a replayed
-- request is refused.
CREATE TABLE webhook_tokens (
    provider    text NOT NULL,
    token       text NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (provider, token)
);
CREATE INDEX webhook_tokens_expiry_idx ON webhook_tokens (expires_at);

-- Requests refused, by reason (receivers add their counts every few seconds), and the last event
-- received and applied per kind: what `pressroom webhooks status` shows.
CREATE TABLE webhook_refusals (
    provider  text NOT NULL,
    reason    text NOT NULL,
    count     bigint NOT NULL DEFAULT 0,
    last_at   timestamptz NOT NULL,
    PRIMARY KEY (provider, reason)
);

CREATE TABLE webhook_kinds (
    provider          text NOT NULL,
    kind              text NOT NULL,
    applied           bigint NOT NULL DEFAULT 0,
    last_received_at  timestamptz NOT NULL,
    last_applied_at   timestamptz NOT NULL,
    PRIMARY KEY (provider, kind)
);

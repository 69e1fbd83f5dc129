-- The site's events delivered to integrations' webhooks, in the reference platform's shape.

-- The Admin API's integrations (its columns); the Admin API's migration may have made it first.
CREATE TABLE IF NOT EXISTS integrations (
    id           text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    type         text NOT NULL DEFAULT 'custom',
    name         text NOT NULL,
    slug         text NOT NULL UNIQUE,
    icon_image   text,
    description  text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE webhooks (
    id                     text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    event                  text NOT NULL,
    target_url             text NOT NULL CHECK (length(target_url) <= 2000),
    name                   text CHECK (length(name) <= 191),
    secret                 text CHECK (length(secret) <= 191),
    api_version            text NOT NULL DEFAULT 'v5',
    integration_id         text NOT NULL REFERENCES integrations (id) ON DELETE CASCADE,
    last_triggered_at      timestamptz,
    last_triggered_status  text,
    last_triggered_error   text CHECK (length(last_triggered_error) <= 500),
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now()
);
-- "Does any webhook subscribe to this event?", asked in every change's transaction.
CREATE INDEX webhooks_event_idx ON webhooks (event);
CREATE INDEX webhooks_integration_idx ON webhooks (integration_id);

-- An outbox entry for a webhook names it, and its place in that webhook's order: the relay hands a
-- webhook's entries out in that order, a few at a time, so a target that comes back after hours
-- gets its events in the order they happened, and a slow one holds back only its own.
CREATE SEQUENCE outbox_webhook_seq;
ALTER TABLE outbox ADD COLUMN webhook_id text, ADD COLUMN webhook_seq bigint;
CREATE INDEX outbox_webhook_open_idx ON outbox (webhook_id, webhook_seq)
    WHERE webhook_id IS NOT NULL AND status IN ('pending', 'sending', 'failed');

-- Every attempt at a webhook: its answer (status code) or the error in our words; never the secret,
-- never the payload.
CREATE TABLE webhook_attempts (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    webhook_id    text NOT NULL,
    outbox_id     text NOT NULL,
    event         text NOT NULL,
    attempt       integer NOT NULL,
    status_code   integer,
    outcome       text NOT NULL CHECK (outcome IN ('delivered', 'retried', 'refused', 'gone')),
    error         text CHECK (length(error) <= 500),
    duration_ms   integer NOT NULL,
    attempted_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_attempts_recent_idx ON webhook_attempts (attempted_at DESC, id DESC);
CREATE INDEX webhook_attempts_webhook_idx ON webhook_attempts (webhook_id, attempted_at DESC);

-- The relay's claim of other entries does not step over a webhook's backlog.
CREATE INDEX outbox_due_unordered_idx ON outbox (next_run_at, created_at) WHERE status = 'pending' AND webhook_id IS NULL;

-- The Admin API's keys, in the reference platform's tables: an integration owns its keys; an admin
-- key's id (24 hex) is the token's `kid`, its secret (64 hex) signs the token after hex decoding.
-- Secrets are kept as they are: verifying an HMAC needs the key itself.
CREATE TABLE integrations (
    id           text PRIMARY KEY DEFAULT substr(replace(gen_random_uuid()::text, '-', ''), 1, 24),
    type         text NOT NULL DEFAULT 'custom' CHECK (type IN ('builtin', 'core', 'internal', 'custom')),
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 191),
    slug         text NOT NULL UNIQUE,
    icon_image   text,
    description  text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    id                 text PRIMARY KEY CHECK (id ~ '^[0-9a-f]{24}$'),
    type               text NOT NULL CHECK (type IN ('content', 'admin')),
    secret             text NOT NULL UNIQUE CHECK (type <> 'admin' OR secret ~ '^[0-9a-f]{64}$'),
    role_id            text,
    integration_id     text REFERENCES integrations (id) ON DELETE CASCADE,
    user_id            text,
    last_seen_at       timestamptz,
    last_seen_version  text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX api_keys_integration_idx ON api_keys (integration_id);

-- A post's excerpt as the reference platform names it (the API reads and writes it).
ALTER TABLE posts ADD COLUMN custom_excerpt text CHECK (length(custom_excerpt) <= 300);

-- Staff who sign in to the dashboard (`pressroom staff add`): an Argon2id hash, never the password.
CREATE TABLE staff (
    id            text PRIMARY KEY,
    email         text NOT NULL,
    password_hash text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX staff_email ON staff (lower(email));

-- Sessions live on the server, so that signing out ends one there; the cookie holds a random
-- token and this table only its SHA-256 (a copy of the table signs nobody in). The CSRF token of
-- the session's forms is derived from the token, never stored.
CREATE TABLE staff_sessions (
    token_hash  text PRIMARY KEY,
    staff_id    text NOT NULL REFERENCES staff (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX staff_sessions_staff ON staff_sessions (staff_id);

-- Every table the four jobs need, named as Ghost names them. Ids are text; times are timestamptz.

CREATE TABLE members (
    id                  text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    uuid                uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
    email               text NOT NULL UNIQUE CHECK (position('@' in email) > 1),
    name                text,
    status              text NOT NULL DEFAULT 'free' CHECK (status IN ('free', 'paid', 'comped')),
    email_disabled      boolean NOT NULL DEFAULT false,
    email_count         integer NOT NULL DEFAULT 0 CHECK (email_count >= 0),
    email_opened_count  integer NOT NULL DEFAULT 0 CHECK (email_opened_count >= 0),
    email_open_rate     integer CHECK (email_open_rate BETWEEN 0 AND 100),
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX members_created_at_idx ON members (created_at);

CREATE TABLE newsletters (
    id                  text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    uuid                uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
    name                text NOT NULL,
    slug                text NOT NULL UNIQUE,
    sender_name         text,
    sender_email        text,
    sender_reply_to     text NOT NULL DEFAULT 'newsletter',
    status              text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'archived')),
    subscribe_on_signup boolean NOT NULL DEFAULT true,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE members_newsletters (
    id            text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    member_id     text NOT NULL REFERENCES members (id) ON DELETE CASCADE,
    newsletter_id text NOT NULL REFERENCES newsletters (id) ON DELETE CASCADE,
    UNIQUE (member_id, newsletter_id)
);
CREATE INDEX members_newsletters_newsletter_idx ON members_newsletters (newsletter_id, member_id);

CREATE TABLE posts (
    id                      text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    uuid                    uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
    title                   text NOT NULL,
    slug                    text NOT NULL UNIQUE,
    html                    text NOT NULL DEFAULT '',
    plaintext               text NOT NULL DEFAULT '',
    status                  text NOT NULL DEFAULT 'draft'
                            CHECK (status IN ('draft', 'scheduled', 'published', 'sent')),
    published_at            timestamptz,
    newsletter_id           text REFERENCES newsletters (id) ON DELETE SET NULL,
    email_recipient_filter  text NOT NULL DEFAULT 'all',
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    CHECK (status <> 'scheduled' OR published_at IS NOT NULL)
);
CREATE INDEX posts_scheduled_idx ON posts (published_at) WHERE status = 'scheduled';

CREATE TABLE emails (
    id                text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    uuid              uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
    post_id           text NOT NULL UNIQUE REFERENCES posts (id) ON DELETE CASCADE,
    newsletter_id     text REFERENCES newsletters (id) ON DELETE SET NULL,
    status            text NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'submitting', 'submitted', 'failed')),
    -- The Temporal run that holds the "submitting" lock: only that run may send this email's batches.
    locked_by         text,
    recipient_filter  text NOT NULL DEFAULT 'all',
    subject           text NOT NULL,
    html              text,
    plaintext         text,
    track_opens       boolean NOT NULL DEFAULT true,
    email_count       integer NOT NULL DEFAULT 0 CHECK (email_count >= 0),
    delivered_count   integer NOT NULL DEFAULT 0 CHECK (delivered_count >= 0),
    opened_count      integer NOT NULL DEFAULT 0 CHECK (opened_count >= 0),
    failed_count      integer NOT NULL DEFAULT 0 CHECK (failed_count >= 0),
    error             text,
    error_data        jsonb,
    submitted_at      timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CHECK (status <> 'submitting' OR locked_by IS NOT NULL)
);

CREATE TABLE email_batches (
    id                       text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    email_id                 text NOT NULL REFERENCES emails (id) ON DELETE CASCADE,
    member_segment           text,
    status                   text NOT NULL DEFAULT 'pending'
                             CHECK (status IN ('pending', 'submitting', 'submitted', 'failed')),
    provider_id              text,
    fallback_sending_domain  boolean NOT NULL DEFAULT false,
    error_status_code        integer,
    error_message            text,
    error_data               jsonb,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    CHECK (status <> 'submitted' OR provider_id IS NOT NULL)
);
CREATE INDEX email_batches_email_idx ON email_batches (email_id, status);
CREATE INDEX email_batches_provider_idx ON email_batches (provider_id) WHERE provider_id IS NOT NULL;

CREATE TABLE email_recipients (
    id            text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    email_id      text NOT NULL REFERENCES emails (id) ON DELETE CASCADE,
    -- No foreign key to members: the record of a send outlives a deleted member.
    member_id     text NOT NULL,
    batch_id      text NOT NULL REFERENCES email_batches (id) ON DELETE CASCADE,
    processed_at  timestamptz,
    delivered_at  timestamptz,
    opened_at     timestamptz,
    failed_at     timestamptz,
    member_uuid   uuid NOT NULL,
    member_email  text NOT NULL,
    member_name   text,
    UNIQUE (email_id, member_id)
);
CREATE INDEX email_recipients_batch_idx ON email_recipients (batch_id);
CREATE INDEX email_recipients_address_idx ON email_recipients (email_id, member_email);
CREATE INDEX email_recipients_member_idx ON email_recipients (member_id);

CREATE TABLE email_recipient_failures (
    id                  text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    email_id            text NOT NULL REFERENCES emails (id) ON DELETE CASCADE,
    member_id           text,
    email_recipient_id  text NOT NULL REFERENCES email_recipients (id) ON DELETE CASCADE,
    code                integer NOT NULL,
    enhanced_code       text,
    message             text NOT NULL,
    severity            text NOT NULL CHECK (severity IN ('permanent', 'temporary')),
    failed_at           timestamptz NOT NULL,
    event_id            text NOT NULL UNIQUE
);
CREATE INDEX email_recipient_failures_recipient_idx ON email_recipient_failures (email_recipient_id);

CREATE TABLE email_spam_complaint_events (
    id             text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    member_id      text NOT NULL,
    email_id       text NOT NULL REFERENCES emails (id) ON DELETE CASCADE,
    email_address  text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (email_id, member_id)
);

CREATE TABLE suppressions (
    id          text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    email       text NOT NULL UNIQUE,
    email_id    text REFERENCES emails (id) ON DELETE SET NULL,
    reason      text NOT NULL CHECK (reason IN ('bounce', 'spam')),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- The transactional outbox: events written in the same transaction as the change that caused them,
-- with the columns of the delivery protocol (state, attempts, next run, last error).
CREATE TABLE outbox (
    id               text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    event_type       text NOT NULL,
    payload          jsonb NOT NULL,
    idempotency_key  text NOT NULL UNIQUE,
    payload_digest   text NOT NULL,
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'dispatched', 'succeeded', 'failed', 'aborted', 'completed')),
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_run_at      timestamptz NOT NULL DEFAULT now(),
    last_error_code  text,
    last_error_msg   text CHECK (length(last_error_msg) <= 2000),
    dispatched_at    timestamptz,
    processed_at     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_due_idx ON outbox (next_run_at, created_at) WHERE status = 'pending';
CREATE INDEX outbox_status_idx ON outbox (status);

-- The idempotency ledger: the source of truth for what an outbox key's delivery produced.
CREATE TABLE idempotency_ledger (
    idempotency_key  text PRIMARY KEY,
    payload_digest   text NOT NULL,
    status           text NOT NULL CHECK (status IN ('succeeded', 'failed')),
    result           jsonb,
    error_code       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- Job state that outlives a run: the analytics cursors and backfill requests live here.
CREATE TABLE jobs (
    id           text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    name         text NOT NULL UNIQUE,
    status       text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'started', 'finished', 'failed')),
    started_at   timestamptz,
    finished_at  timestamptz,
    metadata     jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE automated_emails (
    id               text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    status           text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'inactive')),
    name             text NOT NULL,
    -- member-welcome-email-free, member-welcome-email-paid: one per member status.
    slug             text NOT NULL UNIQUE,
    subject          text NOT NULL,
    html             text NOT NULL,
    plaintext        text NOT NULL DEFAULT '',
    sender_name      text,
    sender_email     text,
    sender_reply_to  text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE automated_email_recipients (
    id                  text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    automated_email_id  text NOT NULL REFERENCES automated_emails (id) ON DELETE CASCADE,
    member_id           text NOT NULL,
    member_uuid         uuid NOT NULL,
    member_email        text NOT NULL,
    member_name         text,
    provider_id         text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (automated_email_id, member_id)
);

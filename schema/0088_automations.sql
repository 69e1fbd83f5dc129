-- Automations: member email sequences in the reference platform's shape. An automation is one path
-- of actions (`wait`, `send_email`) joined by edges; a member entering it gets one run, whose steps
-- record each action as the run reached it (the action's revision then) and how it ended.
CREATE TABLE automations (
    id               text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    slug             text NOT NULL UNIQUE,
    name             text NOT NULL,
    status           text NOT NULL DEFAULT 'inactive' CHECK (status IN ('active', 'inactive')),
    -- The member statuses that enter it at signup and stay eligible while a run goes on.
    member_statuses  text[] NOT NULL CHECK (member_statuses <@ ARRAY['free', 'paid', 'comped']),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- A send_email action's email is an automated email (its sender, its recipients, its redirects);
-- its subject and body as each run sent them are the action's revisions.
CREATE TABLE automation_actions (
    id                  text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    automation_id       text NOT NULL REFERENCES automations (id) ON DELETE CASCADE,
    type                text NOT NULL CHECK (type IN ('wait', 'send_email')),
    automated_email_id  text REFERENCES automated_emails (id) ON DELETE SET NULL,
    -- Removed from the path (kept for the steps that name it).
    deleted_at          timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CHECK (type = 'wait' OR automated_email_id IS NOT NULL OR deleted_at IS NOT NULL)
);
CREATE INDEX automation_actions_automation_idx ON automation_actions (automation_id);

CREATE TABLE automation_action_revisions (
    action_id   text NOT NULL REFERENCES automation_actions (id) ON DELETE CASCADE,
    revision    integer NOT NULL CHECK (revision > 0),
    wait_hours  double precision CHECK (wait_hours >= 0),
    subject     text,
    html        text,
    plaintext   text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (action_id, revision)
);

-- One path: each action has at most one edge out and one edge in.
CREATE TABLE automation_edges (
    id                text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    automation_id     text NOT NULL REFERENCES automations (id) ON DELETE CASCADE,
    source_action_id  text NOT NULL UNIQUE REFERENCES automation_actions (id) ON DELETE CASCADE,
    target_action_id  text NOT NULL UNIQUE REFERENCES automation_actions (id) ON DELETE CASCADE,
    CHECK (source_action_id <> target_action_id)
);

-- A run's workflow id is its idempotency key: a member entering twice gets one run. A deleted
-- member's runs keep no member (their ids go; the counts stay).
CREATE TABLE automation_runs (
    id                 text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    automation_id      text NOT NULL REFERENCES automations (id) ON DELETE CASCADE,
    member_id          text REFERENCES members (id) ON DELETE SET NULL,
    idempotency_key    text NOT NULL UNIQUE,
    status             text NOT NULL DEFAULT 'in_progress'
                       CHECK (status IN ('in_progress', 'completed', 'exited_early')),
    exit_reason        text,
    current_action_id  text REFERENCES automation_actions (id) ON DELETE SET NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    ended_at           timestamptz,
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX automation_runs_automation_idx ON automation_runs (automation_id, created_at DESC);
CREATE INDEX automation_runs_member_idx ON automation_runs (member_id) WHERE member_id IS NOT NULL;

-- Its terminal states are the reference's (`finished`, `failed`, `automation disabled`, `member
-- changed status`, `member unsubscribed`) and the checks Pressroom adds before a send.
CREATE TABLE automation_run_steps (
    id                  text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    run_id              text NOT NULL REFERENCES automation_runs (id) ON DELETE CASCADE,
    action_id           text NOT NULL REFERENCES automation_actions (id) ON DELETE CASCADE,
    revision            integer NOT NULL,
    status              text NOT NULL DEFAULT 'in_progress' CHECK (status IN (
                            'in_progress', 'finished', 'failed', 'automation disabled', 'member changed status',
                            'member unsubscribed', 'member deleted', 'email disabled', 'member suppressed')),
    provider_id         text,
    send_outcome        text CHECK (send_outcome IN ('accepted', 'not_accepted', 'uncertain')),
    send_attempts       integer NOT NULL DEFAULT 0,
    first_uncertain_at  timestamptz,
    last_uncertain_at   timestamptz,
    error               text CHECK (length(error) <= 2000),
    started_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz,
    UNIQUE (run_id, action_id)
);
CREATE INDEX automation_run_steps_action_idx ON automation_run_steps (action_id, status);

-- A click on an automation email's link counts for its automated email.
ALTER TABLE redirects ADD COLUMN automated_email_id text REFERENCES automated_emails (id) ON DELETE SET NULL;

-- The two welcome automations, on every site; today's welcome email (where the site has one)
-- becomes their first step, with its status, so a site that changes nothing sends the same welcome.
INSERT INTO automations (slug, name, member_statuses, status)
SELECT w.slug, w.name, w.statuses, coalesce(ae.status, 'inactive')
FROM (VALUES ('welcome-free', 'Welcome (free members)', ARRAY['free'], 'member-welcome-email-free'),
             ('welcome-paid', 'Welcome (paid members)', ARRAY['paid', 'comped'], 'member-welcome-email-paid'))
     AS w (slug, name, statuses, email_slug)
LEFT JOIN automated_emails ae ON ae.slug = w.email_slug;

INSERT INTO automation_actions (automation_id, type, automated_email_id)
SELECT a.id, 'send_email', ae.id FROM automations a
JOIN automated_emails ae ON ae.slug = 'member-' || replace(a.slug, 'welcome-', 'welcome-email-');

INSERT INTO automation_action_revisions (action_id, revision, subject, html, plaintext)
SELECT act.id, 1, ae.subject, ae.html, ae.plaintext
FROM automation_actions act JOIN automated_emails ae ON ae.id = act.automated_email_id;

-- Clicks counted by Pressroom's own redirects, in the reference platform's tables.
-- A redirect is made when an email that tracks clicks is rendered for sending: one per distinct
-- target and email (its post: one email per post), `from` the path the link carries.
CREATE TABLE redirects (
    id          text PRIMARY KEY,
    "from"      text NOT NULL UNIQUE,
    "to"        text NOT NULL CHECK (length("to") <= 2000),
    post_id     text REFERENCES posts (id) ON DELETE SET NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX redirects_post_idx ON redirects (post_id);

-- One row per request answered. member_id is NULL when the link's `m` named no member (a forwarded
-- email). `scanner` says why a request was taken for a mail scanner's prefetch rather than a reader
-- (NULL: a reader): kept, counted apart, never in the human figures.
CREATE TABLE members_click_events (
    id           text PRIMARY KEY,
    member_id    text REFERENCES members (id) ON DELETE CASCADE,
    redirect_id  text NOT NULL REFERENCES redirects (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    scanner      text CHECK (scanner IN ('user-agent', 'address', 'burst', 'delivery'))
);
CREATE INDEX members_click_events_redirect_idx ON members_click_events (redirect_id, member_id);
CREATE INDEX members_click_events_member_idx ON members_click_events (member_id, created_at);

-- A reader's click whose effects (an open when none was seen, the member seen) wait until it can no
-- longer turn out to be part of a scanner's burst; committed with the click, so none is lost.
CREATE TABLE members_click_events_unsettled (
    click_id    text PRIMARY KEY REFERENCES members_click_events (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL
);
CREATE INDEX members_click_events_unsettled_at_idx ON members_click_events_unsettled (created_at);

-- NULL: as the email's newsletter says (NULL there too: the site's PRESSROOM_EMAIL_TRACK_CLICKS),
-- resolved when the email is rendered, so an email written by any path follows the settings.
ALTER TABLE emails ADD COLUMN track_clicks boolean;
ALTER TABLE newsletters ADD COLUMN track_clicks boolean;
-- When the member was last seen: a click moves it, at most once a day (as on the reference platform).
ALTER TABLE members ADD COLUMN IF NOT EXISTS last_seen_at timestamptz;

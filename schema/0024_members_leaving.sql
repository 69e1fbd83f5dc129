-- Who left which newsletter, when, and how (Ghost's members_subscribe_events): through the link in
-- an email (`link`), by the provider's unsubscribe event (`provider`) or by an operator
-- (`operator`). A row is written only when a subscription was removed, so a link followed twice,
-- or an event read again, records nothing more. `email_id` is the email the link or event came
-- from, when known: its report counts who left through it.
CREATE TABLE members_subscribe_events (
    id             text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    member_id      text NOT NULL REFERENCES members (id) ON DELETE CASCADE,
    newsletter_id  text NOT NULL REFERENCES newsletters (id) ON DELETE CASCADE,
    subscribed     boolean NOT NULL,
    source         text NOT NULL CHECK (source IN ('link', 'provider', 'operator')),
    email_id       text REFERENCES emails (id) ON DELETE SET NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX members_subscribe_events_member_idx ON members_subscribe_events (member_id, created_at);
CREATE INDEX members_subscribe_events_email_idx ON members_subscribe_events (email_id) WHERE email_id IS NOT NULL;

-- Set-aside events are pruned by age (PRESSROOM_REJECTED_EVENTS_KEEP_DAYS).
CREATE INDEX delivery_events_rejected_age_idx ON delivery_events_rejected (rejected_at);

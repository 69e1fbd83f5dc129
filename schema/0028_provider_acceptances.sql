-- Acceptances received pushed (SES's Send events through SNS), kept because SES has no events API
-- to ask: an uncertain send is confirmed from here (pressroom/providers/received.py). `marks` are
-- our message tags (email-id, pressroom-batch, pressroom-outbox); SNS's retries add nothing.
CREATE TABLE provider_acceptances (
    provider             text NOT NULL,
    recipient            text NOT NULL,  -- lower-cased
    marks                jsonb NOT NULL,
    provider_message_id  text NOT NULL,
    accepted_at          timestamptz NOT NULL,
    received_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, recipient, provider_message_id)
);
CREATE INDEX provider_acceptances_marks_idx ON provider_acceptances USING gin (marks jsonb_path_ops);

-- Batches are written chunk by chunk while the first ones are already being sent. Where an
-- email's creation has got to is kept here, in the same transaction as each chunk, so a retried or
-- resumed creation continues after the last chunk written: nobody missing, nobody twice.
CREATE TABLE email_batch_creation (
    email_id             text PRIMARY KEY REFERENCES emails (id) ON DELETE CASCADE,
    -- Fixed when creation starts, so every chunk numbers and routes its batches alike.
    segmented            boolean NOT NULL,
    batch_size           integer NOT NULL CHECK (batch_size >= 1),
    fallback_batch_size  integer NOT NULL CHECK (fallback_batch_size >= 1),
    -- Domain warming: recipients ranked by open rate (highest first, then member id) go through
    -- the fallback domain from this one on, as its (-open rate, or +infinity without one; member
    -- id). NULL: nobody does.
    fallback_from_rate   double precision,
    fallback_from_id     text,
    planned_batches      integer NOT NULL,
    planned_recipients   integer NOT NULL,
    -- Recipients are written group by group (segment, then custom or fallback domain), each group
    -- in member id order; the cursor is the current group, its last member and its count so far.
    group_index          integer NOT NULL DEFAULT 0,
    after_member_id      text,
    written_in_group     integer NOT NULL DEFAULT 0,
    done                 boolean NOT NULL DEFAULT false,
    updated_at           timestamptz NOT NULL DEFAULT now()
);

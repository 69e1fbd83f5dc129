-- `newsletter report` reads what was recorded when it happened instead of anti-joins over every
-- member and recipient (1.8 s on a million recipients):
-- who was left out of an email, by reason, counted once its batches are all written (NULL: its
-- batches were written before this migration, and the report counts as it did then);
ALTER TABLE emails ADD COLUMN left_out jsonb;
-- the email's first and last open, kept by the analytics recount with its opened count.
ALTER TABLE emails ADD COLUMN first_opened_at timestamptz, ADD COLUMN last_opened_at timestamptz;

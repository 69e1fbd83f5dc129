-- The recipient count the site stored for an email (emails.email_count), kept when the recipients
-- really written differed from it by more than 1%: email_count is then corrected to what was
-- written, and `newsletter status` shows both (the reference raises an alert on such a drift).
ALTER TABLE emails ADD COLUMN email_count_expected integer CHECK (email_count_expected >= 0);

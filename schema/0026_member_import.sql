-- `members import`: the reference platform's member note (its export's `note` column, up to 2,000
-- characters), and members found by their address whatever its case, as every command finds them:
-- the import matches each row of a file to a member this way, a chunk of rows at a time.
ALTER TABLE members ADD COLUMN note text CHECK (length(note) <= 2000);
CREATE INDEX members_email_lower_idx ON members (lower(email));

-- Who may read a post (public, members, paid). With the members-only marker in its HTML it decides
-- what each segment of a newsletter gets: free members of a paid post read up to the marker.
ALTER TABLE posts ADD COLUMN visibility text NOT NULL DEFAULT 'public'
    CHECK (visibility IN ('public', 'members', 'paid'));

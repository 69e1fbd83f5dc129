-- Scheduled posts: when the scheduler really published a post, next to the time it was
-- scheduled for (published_at), so lateness is measured from the post's own record.
ALTER TABLE posts ADD COLUMN publish_completed_at timestamptz;

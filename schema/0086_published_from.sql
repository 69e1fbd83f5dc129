-- The status a post had when it was asked to publish at once (draft or scheduled): its timer
-- publishes it a moment later, and the site event `post.published` says what it was before, as
-- the reference says it, not the `scheduled` of the moment between. NULL: published by its schedule.
ALTER TABLE posts ADD COLUMN published_from text CHECK (published_from IN ('draft', 'scheduled'));

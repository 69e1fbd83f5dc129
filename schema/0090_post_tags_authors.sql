-- A post's tags and authors, in the reference platform's shape: tags by name and slug, a post's in
-- order (its first public tag is its primary tag), and its authors, whose names make the email's
-- byline. The reference's authors are its staff users; Pressroom's staff only sign in to the
-- dashboard, so an author is a name (with the slug and address an integration sends), apart.
CREATE TABLE tags (
    id          text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    name        text NOT NULL,
    slug        text NOT NULL UNIQUE,
    description text,
    visibility  text NOT NULL DEFAULT 'public' CHECK (visibility IN ('public', 'internal')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE posts_tags (
    id          text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    post_id     text NOT NULL REFERENCES posts (id) ON DELETE CASCADE,
    tag_id      text NOT NULL REFERENCES tags (id) ON DELETE CASCADE,
    sort_order  integer NOT NULL DEFAULT 0,
    UNIQUE (post_id, tag_id)
);
-- A posts filter's `tag:x` asks "has the post this tag?" from the tag's side.
CREATE INDEX posts_tags_tag_idx ON posts_tags (tag_id, post_id);

CREATE TABLE authors (
    id          text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    name        text NOT NULL,
    slug        text NOT NULL UNIQUE,
    email       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE posts_authors (
    id          text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    post_id     text NOT NULL REFERENCES posts (id) ON DELETE CASCADE,
    author_id   text NOT NULL REFERENCES authors (id) ON DELETE CASCADE,
    sort_order  integer NOT NULL DEFAULT 0,
    UNIQUE (post_id, author_id)
);
CREATE INDEX posts_authors_author_idx ON posts_authors (author_id, post_id);

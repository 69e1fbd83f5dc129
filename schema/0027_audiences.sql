-- Audiences in the reference platform's shape and names: labels and tiers (products) of members,
-- and posts for chosen tiers. A site sharing the database writes these tables; recipient filters
-- (`label:vip`, `tier:gold`) and tier-gated posts read them when batches are written.
CREATE TABLE labels (
    id          text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    name        text NOT NULL,
    slug        text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE members_labels (
    id          text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    member_id   text NOT NULL REFERENCES members (id) ON DELETE CASCADE,
    label_id    text NOT NULL REFERENCES labels (id) ON DELETE CASCADE,
    sort_order  integer NOT NULL DEFAULT 0,
    UNIQUE (member_id, label_id)
);
-- A filter's `label:x` asks, per member, "has the member this label?" (the unique index above);
-- `members list --label x` asks the other way round.
CREATE INDEX members_labels_label_idx ON members_labels (label_id, member_id);

-- Tiers, as the reference platform stores them.
CREATE TABLE products (
    id          text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    name        text NOT NULL,
    slug        text NOT NULL UNIQUE,
    type        text NOT NULL DEFAULT 'paid' CHECK (type IN ('free', 'paid')),
    active      boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- A member's tier, until expiry_at (NULL: no end). Past it the member is no longer of the tier.
CREATE TABLE members_products (
    id          text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    member_id   text NOT NULL REFERENCES members (id) ON DELETE CASCADE,
    product_id  text NOT NULL REFERENCES products (id) ON DELETE CASCADE,
    expiry_at   timestamptz,
    sort_order  integer NOT NULL DEFAULT 0,
    UNIQUE (member_id, product_id)
);
CREATE INDEX members_products_product_idx ON members_products (product_id, member_id);

-- The tiers a post with visibility 'tiers' is for.
CREATE TABLE posts_products (
    id          text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    post_id     text NOT NULL REFERENCES posts (id) ON DELETE CASCADE,
    product_id  text NOT NULL REFERENCES products (id) ON DELETE CASCADE,
    sort_order  integer NOT NULL DEFAULT 0,
    UNIQUE (post_id, product_id)
);

ALTER TABLE posts DROP CONSTRAINT posts_visibility_check;
ALTER TABLE posts ADD CONSTRAINT posts_visibility_check
    CHECK (visibility IN ('public', 'members', 'paid', 'tiers'));

-- What every chunk of a batch creation must agree on besides 0012's: the bodies recipients are
-- grouped by (NULL: free and paid, as before tiers), and the moment tier expiry is judged at, so a
-- member whose tier ends during the creation stays in one group.
ALTER TABLE email_batch_creation ADD COLUMN segments text[];
ALTER TABLE email_batch_creation ADD COLUMN audience_at timestamptz NOT NULL DEFAULT now();

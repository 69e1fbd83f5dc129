-- Posts from the reference's editor: the Lexical (or older mobiledoc) document kept as it was sent,
-- and its email rendering beside the web one (posts.html), since the two differ per card (a video
-- is a linked thumbnail in an email, a toggle is opened). Empty: the email reads posts.html.
ALTER TABLE posts ADD COLUMN lexical text, ADD COLUMN mobiledoc text,
    ADD COLUMN email_html text NOT NULL DEFAULT '';
-- The post's picture and its search-engine fields, as the reference keeps them.
ALTER TABLE posts ADD COLUMN feature_image text, ADD COLUMN feature_image_alt text,
    ADD COLUMN feature_image_caption text, ADD COLUMN meta_title text, ADD COLUMN meta_description text;

-- Posts from the reference's editor: the Lexical (or older mobiledoc) document kept as it was sent,
-- and its email rendering beside the web one (posts.html), since the two differ per card (a video
-- is a linked thumbnail in an email, a toggle is opened). Empty: the email reads posts.html.
ALTER TABLE posts ADD COLUMN lexical text, ADD COLUMN mobiledoc text,
    ADD COLUMN email_html text NOT NULL DEFAULT '';

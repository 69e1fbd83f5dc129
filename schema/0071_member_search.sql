-- The dashboard's members search finds a part of an address or a name anywhere in it: a trigram
-- index answers that without reading every member (pg_trgm is a trusted extension: the database's
-- owner may create it). The expression is operations/member_search.py's, character for character.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX members_search_trgm_idx ON members USING gin ((lower(email || ' ' || coalesce(name, ''))) gin_trgm_ops);

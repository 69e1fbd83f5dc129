-- A recipient row is updated several times after it is written (processed at send, then delivered,
-- opened, failed by analytics) and a member row at every aggregation. Room left on each page lets
-- PostgreSQL update such a row in place (a HOT update: no index entry is rewritten). Applies to
-- pages written from now on.
ALTER TABLE email_recipients SET (fillfactor = 80);
ALTER TABLE members SET (fillfactor = 90);

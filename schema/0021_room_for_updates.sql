-- Rows that are written once and then updated in columns no index covers: a recipient (its send's
-- processed_at, analytics' delivered_at and failed_at) and a member (the analytics recount of its
-- figures). With room left on the row's page an update stays there (HOT): no new row version at
-- the table's end and no entry in every index. Half a page is room for one update of every row;
-- the space freed by the old versions is reclaimed on the page itself for the next.
ALTER TABLE email_recipients SET (fillfactor = 50);
ALTER TABLE members SET (fillfactor = 50);

-- A member's figures are rewritten by the analytics recount: each rewrite that cannot stay on its
-- page adds an entry to every index of members. members_created_at_idx (created_at) repeats the
-- leading column of members_created_id_idx (created_at DESC, id DESC, 0016), which serves every
-- read by creation time (ranges, either order): one index fewer to write per member.
DROP INDEX IF EXISTS members_created_at_idx;

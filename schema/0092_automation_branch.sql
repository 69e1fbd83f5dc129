-- One branch on what the member did: a `wait_for_click` action waits up to its revision's
-- wait_hours for a click on the run's previous email, then follows its `clicked` edge or its
-- `not_clicked` edge. Every other action keeps one edge out (condition NULL); no loops.
ALTER TABLE automation_actions DROP CONSTRAINT automation_actions_type_check;
ALTER TABLE automation_actions ADD CONSTRAINT automation_actions_type_check
    CHECK (type IN ('wait', 'send_email', 'wait_for_click'));
ALTER TABLE automation_actions DROP CONSTRAINT automation_actions_check;
ALTER TABLE automation_actions ADD CONSTRAINT automation_actions_check
    CHECK (type <> 'send_email' OR automated_email_id IS NOT NULL OR deleted_at IS NOT NULL);

ALTER TABLE automation_edges ADD COLUMN condition text CHECK (condition IN ('clicked', 'not_clicked'));
ALTER TABLE automation_edges DROP CONSTRAINT automation_edges_source_action_id_key;
CREATE UNIQUE INDEX automation_edges_source_idx ON automation_edges (source_action_id, coalesce(condition, ''));

-- The path a branch's step took.
ALTER TABLE automation_run_steps ADD COLUMN path text CHECK (path IN ('clicked', 'not_clicked'));

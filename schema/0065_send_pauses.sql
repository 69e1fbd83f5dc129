-- A send paused for its early hard-bounce or complaint rate: since when and why, until resumed.
ALTER TABLE emails ADD COLUMN paused_at timestamptz, ADD COLUMN paused_reason text;

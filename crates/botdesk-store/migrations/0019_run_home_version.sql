-- The checkpoint version of its computer's home a run started from (NULL: none yet, or a run from
-- before versions were kept): "Undo this run's file changes" restores the bot's folder to it.
ALTER TABLE runs ADD COLUMN home_version INTEGER CHECK (home_version IS NULL OR home_version >= 1);

-- The checkpoint version of its computer's home a run started from (NULL: none yet, or a run from
-- before versions were kept), and how many files of its bot's folder the version saved when it
-- ended had written or removed: "Undo this run's file changes" restores the folder to the first.
ALTER TABLE runs ADD COLUMN home_version INTEGER CHECK (home_version IS NULL OR home_version >= 1);
ALTER TABLE runs ADD COLUMN files_changed INTEGER CHECK (files_changed IS NULL OR files_changed >= 0);
-- 1 while a computer's home volume holds exactly its latest checkpoint version (it stopped or was
-- suspended after one); 0 from its next start. A restore made without Docker may replace only such
-- a volume.
ALTER TABLE computers ADD COLUMN home_saved INTEGER NOT NULL DEFAULT 0 CHECK (home_saved IN (0, 1));

-- The Docker host a computer runs on: `local` (this machine's engine) or a name in `hosts`.
-- Its home volume and container are there; its checkpoints are on this machine either way.
-- A workspace has one Team computer per host.
ALTER TABLE computers ADD COLUMN host TEXT NOT NULL DEFAULT 'local';
DROP INDEX one_team_computer;
CREATE UNIQUE INDEX one_team_computer_per_host ON computers(workspace_id, host) WHERE scope = 'team';

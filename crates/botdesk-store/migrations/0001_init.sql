-- Botdesk lease database, first cut: workspaces, computers, bots.
-- Leases, runs, reservations, messages and activity arrive in later migrations.

CREATE TABLE workspaces (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_at  INTEGER NOT NULL
);

CREATE TABLE computers (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
    name          TEXT NOT NULL UNIQUE,
    scope         TEXT NOT NULL CHECK (scope IN ('team', 'private')),
    -- Folder under DATA_DIR/homes holding this computer's workspace.
    home_key      TEXT NOT NULL UNIQUE,
    provider      TEXT NOT NULL,
    -- Opaque handle from the provider (a container id for docker); NULL until provisioned.
    provider_ref  TEXT,
    state         TEXT NOT NULL DEFAULT 'stopped'
                  CHECK (state IN ('stopped', 'booting', 'running', 'suspending', 'suspended', 'error')),
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);

-- At most one Team computer per workspace.
CREATE UNIQUE INDEX one_team_computer ON computers(workspace_id) WHERE scope = 'team';

CREATE TABLE bots (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
    name          TEXT NOT NULL UNIQUE COLLATE NOCASE,
    computer_id   TEXT NOT NULL REFERENCES computers(id),
    model         TEXT,
    instructions  TEXT NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL
);
CREATE INDEX bots_by_computer ON bots(computer_id);

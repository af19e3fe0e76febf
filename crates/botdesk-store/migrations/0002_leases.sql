-- Leases, runs, reservations, messages and activity (DESIGN §7).

ALTER TABLE computers ADD COLUMN control_holder TEXT;
ALTER TABLE computers ADD COLUMN control_lease_id TEXT;
ALTER TABLE computers ADD COLUMN control_expires_at INTEGER;
ALTER TABLE computers ADD COLUMN control_bot_id TEXT;
ALTER TABLE computers ADD COLUMN reservation_id TEXT;
-- Bumped by every state transition, so a writer can tell it read a stale row.
ALTER TABLE computers ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
-- Last exec, lease or control activity (idle suspend counts from here).
ALTER TABLE computers ADD COLUMN last_active_at INTEGER NOT NULL DEFAULT 0;

-- One row per (computer, bot), never deleted while the bot exists, so fences only grow.
-- A released or expired lease keeps its row with holder NULL / expires_at in the past.
CREATE TABLE execution_leases (
    computer_id  TEXT NOT NULL REFERENCES computers(id) ON DELETE CASCADE,
    bot_id       TEXT NOT NULL REFERENCES bots(id) ON DELETE CASCADE,
    holder       TEXT,
    fence        INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    PRIMARY KEY (computer_id, bot_id)
);

CREATE TABLE runs (
    id               TEXT PRIMARY KEY,
    bot_id           TEXT NOT NULL REFERENCES bots(id) ON DELETE CASCADE,
    computer_id      TEXT NOT NULL REFERENCES computers(id) ON DELETE CASCADE,
    status           TEXT NOT NULL CHECK (status IN ('queued', 'leased', 'running', 'waiting_input',
                                                     'waiting_takeover', 'completed', 'failed', 'cancelled')),
    task             TEXT NOT NULL DEFAULT '',
    lease_owner      TEXT,
    fence            INTEGER,
    heartbeat_at     INTEGER,
    takeover_result  TEXT CHECK (takeover_result IN ('finished', 'skipped')),
    error            TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);
CREATE INDEX runs_by_bot ON runs(bot_id, status);

CREATE TABLE reservations (
    id             TEXT PRIMARY KEY,
    computer_id    TEXT NOT NULL REFERENCES computers(id) ON DELETE CASCADE,
    action         TEXT NOT NULL CHECK (action IN ('update', 'recover', 'stop', 'idle_suspend')),
    stage          TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('active', 'interrupted', 'completed', 'failed', 'released')),
    owner_pid      INTEGER NOT NULL,
    owner_boot_id  TEXT NOT NULL,
    heartbeat_at   INTEGER NOT NULL,
    error          TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);

CREATE TABLE messages (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    role        TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'system')),
    content     TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE TABLE tool_calls (
    id          TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    message_id  INTEGER REFERENCES messages(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    arguments   TEXT NOT NULL,
    result      TEXT,
    is_error    INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL,
    finished_at INTEGER
);

CREATE TABLE activity (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    bot_id      TEXT NOT NULL REFERENCES bots(id) ON DELETE CASCADE,
    run_id      TEXT,
    kind        TEXT NOT NULL,
    target      TEXT NOT NULL DEFAULT '',
    status      TEXT NOT NULL,
    exit_code   INTEGER,
    output_tail TEXT NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX activity_by_bot ON activity(bot_id, id);

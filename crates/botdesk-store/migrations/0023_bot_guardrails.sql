-- What a bot must ask the person before doing (botdesk_core::Approvals as JSON), and the logins
-- saved for it: which site and user name (the password and the one-time-code seed are in the OS
-- keyring, never here).
ALTER TABLE bots ADD COLUMN approvals TEXT NOT NULL DEFAULT '{}';
CREATE TABLE bot_logins (
    bot_id TEXT NOT NULL REFERENCES bots(id) ON DELETE CASCADE,
    site TEXT NOT NULL,
    username TEXT NOT NULL,
    has_code INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (bot_id, site)
);

-- A question's answer may also be `always` (allow, and the same on that site from now on).
-- SQLite cannot change a CHECK: the table is made again (nothing refers to it).
CREATE TABLE questions_new (
    id           INTEGER PRIMARY KEY,
    run_id       TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    bot_id       TEXT NOT NULL REFERENCES bots(id) ON DELETE CASCADE,
    kind         TEXT NOT NULL,
    question     TEXT NOT NULL,
    asked_at     INTEGER NOT NULL,
    answer       TEXT CHECK (answer IN ('allow', 'always', 'deny')),
    note         TEXT,
    answered_at  INTEGER
);
INSERT INTO questions_new (id, run_id, bot_id, kind, question, asked_at, answer, note, answered_at)
    SELECT id, run_id, bot_id, kind, question, asked_at, answer, note, answered_at FROM questions;
DROP TABLE questions;
ALTER TABLE questions_new RENAME TO questions;
CREATE INDEX questions_open ON questions (bot_id) WHERE answer IS NULL;

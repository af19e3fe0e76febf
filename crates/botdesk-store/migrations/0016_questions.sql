-- A run's question to the person (a safety check its model's provider put on an action; later,
-- any approval): the run waits until it is answered (allow or deny, with an optional note), by
-- the app or `botdesk approve|deny` from any process.
CREATE TABLE questions (
    id           INTEGER PRIMARY KEY,
    run_id       TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    bot_id       TEXT NOT NULL REFERENCES bots(id) ON DELETE CASCADE,
    kind         TEXT NOT NULL,
    question     TEXT NOT NULL,
    asked_at     INTEGER NOT NULL,
    answer       TEXT CHECK (answer IN ('allow', 'deny')),
    note         TEXT,
    answered_at  INTEGER
);
CREATE INDEX questions_open ON questions (bot_id) WHERE answer IS NULL;

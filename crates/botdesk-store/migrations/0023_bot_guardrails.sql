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

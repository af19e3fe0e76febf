-- Model providers the person set up (DESIGN §9). Nothing here is a secret: the API key of a model
-- lives in the OS keyring under ("botdesk", "model:<id>"); `has_key` only says one was stored.
CREATE TABLE models (
    id          TEXT PRIMARY KEY NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('anthropic', 'openai', 'openai-compatible')),
    model       TEXT NOT NULL,
    base_url    TEXT,
    has_key     INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL
);

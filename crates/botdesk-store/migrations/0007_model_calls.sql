-- What each model call of a run cost, in tokens as the provider counted them. `input_tokens` is
-- what was neither read from nor written to the provider's prompt cache.
CREATE TABLE model_calls (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id              TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    input_tokens        INTEGER NOT NULL CHECK (input_tokens >= 0),
    output_tokens       INTEGER NOT NULL CHECK (output_tokens >= 0),
    cache_read_tokens   INTEGER NOT NULL CHECK (cache_read_tokens >= 0),
    cache_write_tokens  INTEGER NOT NULL CHECK (cache_write_tokens >= 0),
    created_at          INTEGER NOT NULL
);
CREATE INDEX model_calls_by_run ON model_calls(run_id);

-- What model calls cost in money, and what a run may spend.
-- A model's prices in US dollars per million tokens (known defaults are set at `model add`).
CREATE TABLE model_prices (
    model_id     TEXT PRIMARY KEY REFERENCES models(id) ON DELETE CASCADE,
    input        REAL NOT NULL CHECK (input >= 0),
    output       REAL NOT NULL CHECK (output >= 0),
    cache_read   REAL NOT NULL CHECK (cache_read >= 0),
    cache_write  REAL NOT NULL CHECK (cache_write >= 0)
);
-- A model call's cost in dollars, when its model's prices were known at the time.
ALTER TABLE model_calls ADD COLUMN cost_usd REAL;
-- A bot's limits per run (no row, or NULL: the default token limit, no money limit).
CREATE TABLE bot_budgets (
    bot_id  TEXT PRIMARY KEY REFERENCES bots(id) ON DELETE CASCADE,
    tokens  INTEGER CHECK (tokens > 0),
    usd     REAL CHECK (usd > 0)
);

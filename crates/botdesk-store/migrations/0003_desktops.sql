-- Per-bot desktops (DESIGN §6): display slot N of a computer is X display :N.
-- A slot is occupied while its row exists: assigned to a bot, being released, or `failed` (its
-- teardown was not verified, so it stays reserved until a later release verifies it).
CREATE TABLE desktops (
    computer_id    TEXT NOT NULL REFERENCES computers(id) ON DELETE CASCADE,
    slot           INTEGER NOT NULL CHECK (slot >= 1),
    bot_id         TEXT REFERENCES bots(id) ON DELETE SET NULL,
    state          TEXT NOT NULL CHECK (state IN ('assigned', 'releasing', 'failed')),
    view_token     TEXT NOT NULL,
    control_token  TEXT,
    created_at     INTEGER NOT NULL,
    PRIMARY KEY (computer_id, slot)
);
CREATE UNIQUE INDEX one_desktop_per_bot ON desktops(computer_id, bot_id) WHERE bot_id IS NOT NULL;

-- Pause and take: the person asks a run to pause at its next step boundary (the run then waits
-- for them as if it had asked for a takeover), and hands the screen back with an optional note.
ALTER TABLE runs ADD COLUMN pause_requested_at INTEGER;
ALTER TABLE runs ADD COLUMN handback_note TEXT;

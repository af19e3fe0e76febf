-- A model's context window and the output tokens asked of it per call, when the person set them
-- (no row: its family's defaults).
CREATE TABLE model_limits (
    model_id        TEXT PRIMARY KEY REFERENCES models(id) ON DELETE CASCADE,
    context_window  INTEGER NOT NULL CHECK (context_window > 0),
    max_output      INTEGER NOT NULL CHECK (max_output > 0)
);

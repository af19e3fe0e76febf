-- Claude's extended thinking budget the person set for a model (tokens; 0: off); NULL: what the
-- table of models gives its family.
ALTER TABLE model_limits ADD COLUMN thinking INTEGER CHECK (thinking IS NULL OR thinking = 0 OR thinking >= 1024);

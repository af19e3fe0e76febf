-- A model may also give coordinates in pixels of the image its own processor resized
-- (smart-resize: Qwen2.5-VL, UI-TARS-1.5). The column's CHECK cannot change in place: a new
-- column takes the values, the old one goes, the new one takes its name.
ALTER TABLE models ADD COLUMN coordinate_space TEXT NOT NULL DEFAULT 'pixels' CHECK (coordinate_space IN ('pixels', '0-1000', 'smart-resize'));
UPDATE models SET coordinate_space = coordinates;
ALTER TABLE models DROP COLUMN coordinates;
ALTER TABLE models RENAME COLUMN coordinate_space TO coordinates;

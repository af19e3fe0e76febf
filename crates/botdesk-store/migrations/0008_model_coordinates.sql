-- How a model gives screen coordinates: pixels of the screenshot, or 0 to 1000 on each axis.
ALTER TABLE models ADD COLUMN coordinates TEXT NOT NULL DEFAULT 'pixels' CHECK (coordinates IN ('pixels', '0-1000'));

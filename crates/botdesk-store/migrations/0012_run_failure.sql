-- Why a failed run failed, as a code a front end or a script can branch on (MODEL_BAD_KEY,
-- OVER_BUDGET, …); the sentence stays in `error`. NULL for runs that did not fail, and for
-- failed runs from before this column.
ALTER TABLE runs ADD COLUMN failure TEXT;

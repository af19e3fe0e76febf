-- A computer's home is a Docker volume. `home_volume` names the volume that holds a whole home
-- (created and restored); it is cleared before that volume's deletion starts, so a half-deleted
-- volume is never used or checkpointed again.
ALTER TABLE computers ADD COLUMN home_volume TEXT;

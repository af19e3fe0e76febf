-- A computer made in advance on a host (its network, home volume and container, started), so the
-- next computer created there is ready at once: that computer takes the spare's id and home volume
-- (its containers, volume and network carry the id), and the row goes.
CREATE TABLE spares (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    home_volume TEXT NOT NULL,
    -- The image and resources it was made with: a spare made before an upgrade or a change of
    -- the settings is made anew.
    image TEXT NOT NULL,
    memory_bytes INTEGER NOT NULL,
    nano_cpus INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);

-- Each bot's own uid, which it runs as on a Team computer (a Private computer runs its bot as
-- 1000). Numbers are never reused: the folder of a removed bot may remain, and a later bot must
-- not own it. `bot_uids.last` is the last number given.
CREATE TABLE bot_uids (
    one   INTEGER PRIMARY KEY CHECK (one = 1),
    last  INTEGER NOT NULL
);
ALTER TABLE bots ADD COLUMN uid INTEGER NOT NULL DEFAULT 0;
UPDATE bots SET uid = 2000 + (SELECT COUNT(*) FROM bots AS b WHERE b.created_at < bots.created_at OR (b.created_at = bots.created_at AND b.id <= bots.id));
INSERT INTO bot_uids (one, last) VALUES (1, (SELECT COALESCE(MAX(uid), 2000) FROM bots));
CREATE UNIQUE INDEX bots_by_uid ON bots(uid);

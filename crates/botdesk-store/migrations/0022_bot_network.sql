-- Each bot's network policy (botdesk_core::NetPolicy as JSON), and how far the engine has read
-- its computer's refusals of it: the boot of the computer's services that counts them, and the
-- last number taken into the bot's activity.
ALTER TABLE bots ADD COLUMN network TEXT NOT NULL DEFAULT '{"mode":"open"}';
ALTER TABLE bots ADD COLUMN net_boot TEXT NOT NULL DEFAULT '';
ALTER TABLE bots ADD COLUMN net_seen INTEGER NOT NULL DEFAULT 0;

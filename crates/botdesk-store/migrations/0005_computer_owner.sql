-- A Private computer belongs to one bot, also while that bot works on the Team computer: switching
-- a bot between Team and Private keeps both homes, and switching back reuses its Private computer.
ALTER TABLE computers ADD COLUMN owner_bot TEXT;
UPDATE computers SET owner_bot = (SELECT id FROM bots WHERE bots.computer_id = computers.id LIMIT 1)
 WHERE scope = 'private';
CREATE UNIQUE INDEX one_private_computer_per_bot ON computers(owner_bot) WHERE owner_bot IS NOT NULL;

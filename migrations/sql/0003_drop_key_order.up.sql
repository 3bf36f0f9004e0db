-- The relay keeps keys apart with share locks (one claimer per key at a
-- time), so it no longer walks a key's unfinished events: drop the index
-- that served that walk, which every enqueue paid for.
DROP INDEX IF EXISTS courier_outbox_key_order;

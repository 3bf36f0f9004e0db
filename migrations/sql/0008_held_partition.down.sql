-- Reverts 0008_held_partition.up.sql: events sleeping through a hold fall
-- due at once, as an older relay expects.
UPDATE courier_outbox_waiting SET next_attempt_at = now() WHERE held_partition IS NOT NULL;
DROP INDEX courier_outbox_waiting_held;
ALTER TABLE courier_outbox_waiting DROP COLUMN held_partition;

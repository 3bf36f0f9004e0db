-- Reverts 0002_notify_trigger.up.sql.
DROP TRIGGER IF EXISTS courier_outbox_notify ON courier_outbox;
DROP FUNCTION IF EXISTS courier_outbox_notify();

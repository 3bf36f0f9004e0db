-- Reverts 0006_activity.up.sql: the activity of the relays is lost.
DROP INDEX courier_outbox_published_error;
DROP INDEX courier_outbox_published_keys;
DROP INDEX courier_outbox_published_at;
DROP TABLE courier_outbox_activity;

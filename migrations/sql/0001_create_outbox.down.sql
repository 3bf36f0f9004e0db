-- Reverts 0001_create_outbox.up.sql. Drops every outbox event.
DROP TABLE IF EXISTS courier_outbox;

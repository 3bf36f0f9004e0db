-- Reverts 0001_create_inbox.up.sql. Forgets every processed id: messages
-- delivered again afterwards are processed again.
DROP TABLE IF EXISTS courier_inbox;

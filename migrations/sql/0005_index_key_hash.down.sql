-- Reverts 0005_index_key_hash.up.sql: the indexes by key hold the topic
-- and the key again. It fails ("index row size exceeds" or "index row
-- requires") while a waiting or dead event has a topic and key too long to
-- index: purge such events first (courier outbox purge).

DROP INDEX courier_outbox_waiting_key;
CREATE INDEX courier_outbox_waiting_key ON courier_outbox_waiting (topic, partition_key, seq);

DROP INDEX courier_outbox_dead_key;
CREATE INDEX courier_outbox_dead_key ON courier_outbox_dead (topic, partition_key, seq);

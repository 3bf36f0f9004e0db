-- Keys and topics of any length in waiting and dead events. Their indexes
-- by key held the topic and the key themselves, and PostgreSQL refuses an
-- index entry over about 2,700 bytes: an event whose key (or topic) was
-- longer, written into courier_outbox around Enqueue's checks, could be
-- neither parked nor dead-lettered, and the relay retried its batch
-- forever. The indexes now hold a 64-bit hash of (topic, key) and the seq;
-- the relay's statements compare that hash, then the topic and key
-- themselves, so a collision costs a row read and nothing else.
-- courier_outbox itself is untouched: an enqueue costs what it did.
--
-- On a live table this holds a SHARE lock on courier_outbox_waiting and
-- courier_outbox_dead (which only the relay and the admin write) while the
-- indexes are built: a few seconds per million waiting or dead events.

DROP INDEX courier_outbox_waiting_key;
CREATE INDEX courier_outbox_waiting_key ON courier_outbox_waiting
    (hashtextextended(partition_key, hashtextextended(topic, 0)), seq);

DROP INDEX courier_outbox_dead_key;
CREATE INDEX courier_outbox_dead_key ON courier_outbox_dead
    (hashtextextended(partition_key, hashtextextended(topic, 0)), seq);

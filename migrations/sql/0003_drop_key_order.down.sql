-- Reverts 0003_drop_key_order.up.sql.
CREATE INDEX IF NOT EXISTS courier_outbox_key_order
    ON courier_outbox (topic, partition_key, seq)
    WHERE status <> 'published';

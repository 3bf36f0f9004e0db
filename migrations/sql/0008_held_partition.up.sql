-- Waiting events that a held partition keeps (the cluster's condition: no
-- leader, too few in-sync replicas, a request timing out) sleep through
-- its hold instead of falling due at each of its steps. One event of the
-- partition is its probe, due when the hold is up; the others, and the
-- events behind them in their keys, sleep until a batch publishes an event
-- of that partition, which wakes them. So a long hold costs one event per
-- step, however many wait, and the claim never walks a held partition's
-- events to find the healthy ones.
--
--   held_partition               the partition whose hold the event
--                                sleeps through (-1: its whole topic's);
--                                NULL for every other waiting event.
--   courier_outbox_waiting_held  finds a partition's sleepers: it holds an
--                                entry for held events only, so it costs
--                                the others nothing.
--
-- Adding a column without a default rewrites nothing; the index is built
-- under a SHARE lock on courier_outbox_waiting (which only the relay and
-- the admin write), over no rows. A relay of this version writes both, and
-- refuses to start without them (naming the migrate command).

ALTER TABLE courier_outbox_waiting ADD COLUMN held_partition integer;
CREATE INDEX courier_outbox_waiting_held ON courier_outbox_waiting (topic, held_partition)
    WHERE held_partition IS NOT NULL;

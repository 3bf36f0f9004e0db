-- What an operator's console reads, beside the tables of 0004: the relay's
-- activity minute by minute, and indexes of the history for its filters.
-- courier_outbox itself is untouched: an enqueue costs what it did.
--
--   courier_outbox_activity  how many events the relays published each
--                            minute, and how long after their enqueue
--                            (summed, and the longest): a row per minute
--                            and claim share, which the relay adds to in
--                            the statement that moves a batch to the
--                            history, so an hour of activity is 60 rows to
--                            read, however many events it saw. Its rows
--                            leave with the history's retention.
--
-- A relay of this version writes courier_outbox_activity, and refuses to
-- start without it (naming the migrate command).

CREATE TABLE courier_outbox_activity (
    minute          timestamptz      NOT NULL,
    shard           integer          NOT NULL,
    published       bigint           NOT NULL,
    lag_sum_seconds double precision NOT NULL,
    lag_max_seconds double precision NOT NULL,
    PRIMARY KEY (minute, shard)
) WITH (fillfactor = 70);

-- Indexes of the history for the console's filters, none of them a
-- B-tree entry per event (which would cost the relay as much again as the
-- event):
--
--   courier_outbox_published_at     published_at, by block range: events go
--                                   in in the order of their publication,
--                                   so a time range reads a few summaries.
--   courier_outbox_published_keys   per block range of 32 pages, the range
--                                   of seq and a bloom filter of the keys,
--                                   aggregate ids and tenants: a lookup by
--                                   one of them reads the few ranges that
--                                   may hold it. (With seq beside them, the
--                                   planner, which has no estimate of a bloom
--                                   filter, prices a lookup that also bounds
--                                   seq by the seq's order: producer.Admin's
--                                   queries do.)
--   courier_outbox_published_error  the events published after a failed
--                                   attempt (few), by seq.
--
-- Block ranges are summarized by (auto)vacuum, as the history's other
-- indexes are; the relay pays nothing for them but for an insert into a
-- range already summarized, and the insert into the partial index of the
-- events that failed first.
--
-- On a live table the indexes are built under a SHARE lock on
-- courier_outbox_published: the relay's moves to the history wait while they
-- read the history (about a second per million published events).
CREATE INDEX courier_outbox_published_at ON courier_outbox_published USING brin (published_at);
CREATE INDEX courier_outbox_published_keys ON courier_outbox_published USING brin (seq,
    partition_key text_bloom_ops (n_distinct_per_range = 1000),
    aggregate_id text_bloom_ops (n_distinct_per_range = 1000),
    tenant_id text_bloom_ops (n_distinct_per_range = 1000)) WITH (pages_per_range = 32);
CREATE INDEX courier_outbox_published_error ON courier_outbox_published (seq) WHERE last_error IS NOT NULL;

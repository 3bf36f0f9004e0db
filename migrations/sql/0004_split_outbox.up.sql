-- courier outbox layout, version 2: a lean queue the business transaction
-- writes to, and tables of their own for everything the relay and the
-- operators need afterwards.
--
--   courier_outbox            new events, and only those: the primary key is
--                             its one index, so an enqueue costs one row and
--                             one index entry, and no trigger.
--   courier_outbox_waiting    events that wait: for a retry, for their
--                             NotBefore, or behind such an event of their key.
--   courier_outbox_dead       dead-lettered events, until requeued or purged.
--   courier_outbox_published  published events, insert-only, partitioned by
--                             day of publication: retention drops partitions.
--   courier_outbox_keys       idempotency keys, written only by events that
--                             carry one.
--
-- An existing courier_outbox (version 1) is converted in place: its pending,
-- failed and dead-lettered events move to the new tables with their seq, so
-- neither order nor state changes; its published events stay where they are,
-- in the table renamed courier_outbox_legacy, which the relay drops whole once
-- every event in it is past retention. Nothing is copied row by row but the
-- unfinished events and the idempotency keys.

-- The old table steps aside, with the names of its objects.
ALTER TABLE courier_outbox RENAME TO courier_outbox_legacy;
DO $$
BEGIN
    EXECUTE format('ALTER SEQUENCE %s RENAME TO courier_outbox_legacy_seq_seq',
        pg_get_serial_sequence('courier_outbox_legacy', 'seq'));
END
$$;
ALTER INDEX courier_outbox_pkey RENAME TO courier_outbox_legacy_pkey;
ALTER INDEX courier_outbox_seq_key RENAME TO courier_outbox_legacy_seq_key;
ALTER INDEX courier_outbox_published RENAME TO courier_outbox_legacy_published_at;
DROP INDEX courier_outbox_idempotency_key;
DROP INDEX courier_outbox_claim;
DROP INDEX courier_outbox_blockers;
DROP INDEX courier_outbox_due;
DROP INDEX courier_outbox_status_created;
DROP INDEX IF EXISTS courier_outbox_key_order;
DROP TRIGGER IF EXISTS courier_outbox_notify ON courier_outbox_legacy;
DROP FUNCTION IF EXISTS courier_outbox_notify();

-- New events. Enqueue inserts here and nothing else; the relay reads them in
-- seq order and deletes each one as it moves on (published, waiting or dead).
CREATE TABLE courier_outbox (
    seq             bigint      GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME courier_outbox_seq) PRIMARY KEY,
    id              uuid        NOT NULL,
    topic           text        NOT NULL,
    partition_key   text,
    event_type      text        NOT NULL,
    aggregate_type  text,
    aggregate_id    text,
    tenant_id       text,
    correlation_id  text,
    causation_id    text,
    idempotency_key text,
    payload         bytea       NOT NULL,
    content_type    text        NOT NULL,
    headers         jsonb,
    max_retries     integer,
    not_before      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- A queue churns: vacuum it every autovacuum round once a few thousand rows
-- are dead, whatever its size, so that it stays as small as its backlog.
ALTER TABLE courier_outbox SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 50000,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 50000
);

-- Events that wait, each with its state: 'failed' waits for a retry after
-- a failed attempt; 'pending' was never attempted and waits for its
-- next_attempt_at (NotBefore, or a moment after Kafka was unreachable) or
-- for an earlier event of its key. The events of a key leave in seq order.
CREATE TABLE courier_outbox_waiting (
    seq             bigint      PRIMARY KEY,
    id              uuid        NOT NULL,
    topic           text        NOT NULL,
    partition_key   text,
    event_type      text        NOT NULL,
    aggregate_type  text,
    aggregate_id    text,
    tenant_id       text,
    correlation_id  text,
    causation_id    text,
    idempotency_key text,
    payload         bytea       NOT NULL,
    content_type    text        NOT NULL,
    headers         jsonb,
    max_retries     integer,
    created_at      timestamptz NOT NULL,
    status          text        NOT NULL CHECK (status IN ('pending', 'failed')),
    retry_count     integer     NOT NULL DEFAULT 0,
    last_error      text,
    last_attempt_at timestamptz,
    first_failed_at timestamptz,
    next_attempt_at timestamptz NOT NULL
);
ALTER TABLE courier_outbox_waiting SET (autovacuum_vacuum_scale_factor = 0.05);
CREATE INDEX courier_outbox_waiting_key ON courier_outbox_waiting (topic, partition_key, seq);
CREATE INDEX courier_outbox_waiting_due ON courier_outbox_waiting (next_attempt_at);

-- Dead-lettered events stay until an operator requeues or purges them.
CREATE TABLE courier_outbox_dead (
    seq              bigint      PRIMARY KEY,
    id               uuid        NOT NULL,
    topic            text        NOT NULL,
    partition_key    text,
    event_type       text        NOT NULL,
    aggregate_type   text,
    aggregate_id     text,
    tenant_id        text,
    correlation_id   text,
    causation_id     text,
    idempotency_key  text,
    payload          bytea       NOT NULL,
    content_type     text        NOT NULL,
    headers          jsonb,
    max_retries      integer,
    created_at       timestamptz NOT NULL,
    retry_count      integer     NOT NULL DEFAULT 0,
    last_error       text,
    last_attempt_at  timestamptz,
    first_failed_at  timestamptz,
    dead_lettered_at timestamptz NOT NULL
);
CREATE INDEX courier_outbox_dead_key ON courier_outbox_dead (topic, partition_key, seq);

-- Published events, written once and never updated. One partition per UTC
-- day of publication (courier_outbox_published_pYYYYMMDD), made days ahead
-- by the relay; the default partition catches what no day partition takes.
CREATE TABLE courier_outbox_published (
    seq             bigint      NOT NULL,
    id              uuid        NOT NULL,
    topic           text        NOT NULL,
    partition_key   text,
    event_type      text        NOT NULL,
    aggregate_type  text,
    aggregate_id    text,
    tenant_id       text,
    correlation_id  text,
    causation_id    text,
    idempotency_key text,
    payload         bytea       NOT NULL,
    content_type    text        NOT NULL,
    headers         jsonb,
    max_retries     integer,
    created_at      timestamptz NOT NULL,
    retry_count     integer     NOT NULL DEFAULT 0,
    last_error      text,
    first_failed_at timestamptz,
    published_at    timestamptz NOT NULL
) PARTITION BY RANGE (published_at);
-- Block-range indexes: published events go in in about the order of their
-- seq and of their ids (UUIDv7, which sort by creation time), so a BRIN
-- finds an event by id or pages by seq for the cost of a few summaries,
-- where a B-tree entry per event would double the relay's writes. (An id
-- of your own that does not sort by time is found by a scan of the history.)
CREATE INDEX courier_outbox_published_id ON courier_outbox_published USING brin (id);
CREATE INDEX courier_outbox_published_seq ON courier_outbox_published USING brin (seq);
CREATE TABLE courier_outbox_published_default PARTITION OF courier_outbox_published DEFAULT;
DO $$
DECLARE
    day date;
BEGIN
    FOR day IN SELECT generate_series((now() AT TIME ZONE 'UTC')::date - 1, (now() AT TIME ZONE 'UTC')::date + 3, interval '1 day')::date LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF courier_outbox_published FOR VALUES FROM (%L) TO (%L)',
            'courier_outbox_published_p' || to_char(day, 'YYYYMMDD'),
            day::text || ' 00:00:00+00', (day + 1)::text || ' 00:00:00+00');
    END LOOP;
END
$$;

-- Idempotency keys: one row per (topic, key), kept as long as published
-- events are.
CREATE TABLE courier_outbox_keys (
    topic           text        NOT NULL,
    idempotency_key text        NOT NULL,
    event_id        uuid        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, idempotency_key)
);
CREATE INDEX courier_outbox_keys_created ON courier_outbox_keys (created_at);

-- The unfinished events of the old table move over with their seq, and the
-- queue's seq carries on after the old one.
INSERT INTO courier_outbox (
    seq, id, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
    causation_id, idempotency_key, payload, content_type, headers, max_retries, created_at)
OVERRIDING SYSTEM VALUE
SELECT seq, id, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
    causation_id, idempotency_key, payload, content_type, NULLIF(headers, '{}'::jsonb), max_retries, created_at
FROM courier_outbox_legacy
WHERE status = 'pending' AND retry_count = 0 AND next_attempt_at <= created_at
ORDER BY seq;

INSERT INTO courier_outbox_waiting (
    seq, id, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
    causation_id, idempotency_key, payload, content_type, headers, max_retries, created_at,
    status, retry_count, last_error, last_attempt_at, first_failed_at, next_attempt_at)
SELECT seq, id, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
    causation_id, idempotency_key, payload, content_type, NULLIF(headers, '{}'::jsonb), max_retries, created_at,
    status, retry_count, last_error, last_attempt_at, first_failed_at, next_attempt_at
FROM courier_outbox_legacy
WHERE status = 'failed' OR (status = 'pending' AND (retry_count > 0 OR next_attempt_at > created_at));

INSERT INTO courier_outbox_dead (
    seq, id, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
    causation_id, idempotency_key, payload, content_type, headers, max_retries, created_at,
    retry_count, last_error, last_attempt_at, first_failed_at, dead_lettered_at)
SELECT seq, id, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
    causation_id, idempotency_key, payload, content_type, NULLIF(headers, '{}'::jsonb), max_retries, created_at,
    retry_count, last_error, last_attempt_at, first_failed_at, COALESCE(last_attempt_at, created_at)
FROM courier_outbox_legacy
WHERE status = 'dead_lettered';

INSERT INTO courier_outbox_keys (topic, idempotency_key, event_id, created_at)
SELECT topic, idempotency_key, id, created_at
FROM courier_outbox_legacy
WHERE idempotency_key IS NOT NULL;

DELETE FROM courier_outbox_legacy WHERE status <> 'published';

DO $$
DECLARE
    last bigint := GREATEST(
        (SELECT max(seq) FROM courier_outbox_legacy),
        (SELECT max(seq) FROM courier_outbox),
        (SELECT max(seq) FROM courier_outbox_waiting),
        (SELECT max(seq) FROM courier_outbox_dead));
BEGIN
    IF last IS NOT NULL THEN
        PERFORM setval('courier_outbox_seq', last);
    END IF;
    -- Nothing was ever published: the old table has no history to keep.
    IF NOT EXISTS (SELECT FROM courier_outbox_legacy) THEN
        DROP TABLE courier_outbox_legacy;
    END IF;
END
$$;

-- Reverts 0004_split_outbox.up.sql: every event, of every table, goes back
-- into one courier_outbox of version 1 with its seq and state, and the NOTIFY
-- trigger of 0002 comes back.

CREATE TABLE courier_outbox_v1 (
    id               uuid        PRIMARY KEY,
    seq              bigint      GENERATED ALWAYS AS IDENTITY,
    topic            text        NOT NULL CHECK (topic <> ''),
    partition_key    text,
    event_type       text        NOT NULL CHECK (event_type <> ''),
    aggregate_type   text,
    aggregate_id     text,
    tenant_id        text,
    correlation_id   text,
    causation_id     text,
    idempotency_key  text,
    payload          bytea       NOT NULL,
    content_type     text        NOT NULL,
    headers          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    status           text        NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'failed', 'published', 'dead_lettered')),
    retry_count      integer     NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    max_retries      integer     CHECK (max_retries >= 0),
    last_error       text,
    last_attempt_at  timestamptz,
    first_failed_at  timestamptz,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    published_at     timestamptz
);

INSERT INTO courier_outbox_v1 (
    id, seq, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
    causation_id, idempotency_key, payload, content_type, headers, status, retry_count, max_retries,
    last_error, last_attempt_at, first_failed_at, next_attempt_at, created_at, published_at)
OVERRIDING SYSTEM VALUE
SELECT id, seq, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
    causation_id, idempotency_key, payload, content_type, COALESCE(headers, '{}'::jsonb), 'pending', 0, max_retries,
    NULL::text, NULL::timestamptz, NULL::timestamptz, COALESCE(not_before, created_at), created_at, NULL::timestamptz
FROM courier_outbox
UNION ALL
SELECT id, seq, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
    causation_id, idempotency_key, payload, content_type, COALESCE(headers, '{}'::jsonb), status, retry_count, max_retries,
    last_error, last_attempt_at, first_failed_at, next_attempt_at, created_at, NULL
FROM courier_outbox_waiting
UNION ALL
SELECT id, seq, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
    causation_id, idempotency_key, payload, content_type, COALESCE(headers, '{}'::jsonb), 'dead_lettered', retry_count, max_retries,
    last_error, last_attempt_at, first_failed_at, dead_lettered_at, created_at, NULL
FROM courier_outbox_dead
UNION ALL
SELECT id, seq, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
    causation_id, idempotency_key, payload, content_type, COALESCE(headers, '{}'::jsonb), 'published', retry_count, max_retries,
    last_error, published_at, first_failed_at, created_at, created_at, published_at
FROM courier_outbox_published;

DO $$
BEGIN
    IF to_regclass('courier_outbox_legacy') IS NOT NULL THEN
        INSERT INTO courier_outbox_v1 OVERRIDING SYSTEM VALUE
        SELECT id, seq, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
            causation_id, idempotency_key, payload, content_type, headers, status, retry_count, max_retries,
            last_error, last_attempt_at, first_failed_at, next_attempt_at, created_at, published_at
        FROM courier_outbox_legacy;
        DROP TABLE courier_outbox_legacy;
    END IF;
END
$$;

DROP TABLE courier_outbox;
DROP TABLE courier_outbox_waiting;
DROP TABLE courier_outbox_dead;
DROP TABLE courier_outbox_published;
DROP TABLE courier_outbox_keys;

ALTER TABLE courier_outbox_v1 RENAME TO courier_outbox;
ALTER INDEX courier_outbox_v1_pkey RENAME TO courier_outbox_pkey;
DO $$
BEGIN
    EXECUTE format('ALTER SEQUENCE %s RENAME TO courier_outbox_seq_seq', pg_get_serial_sequence('courier_outbox', 'seq'));
    PERFORM setval(pg_get_serial_sequence('courier_outbox', 'seq'), COALESCE((SELECT max(seq) FROM courier_outbox), 1));
END
$$;
ALTER TABLE courier_outbox ADD CONSTRAINT courier_outbox_seq_key UNIQUE (seq);
ALTER TABLE courier_outbox SET (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);
CREATE UNIQUE INDEX courier_outbox_idempotency_key
    ON courier_outbox (topic, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX courier_outbox_claim
    ON courier_outbox (seq)
    WHERE status IN ('pending', 'failed');
CREATE INDEX courier_outbox_blockers
    ON courier_outbox (topic, partition_key, seq)
    WHERE status IN ('failed', 'dead_lettered') OR next_attempt_at > created_at;
CREATE INDEX courier_outbox_due
    ON courier_outbox (next_attempt_at)
    WHERE status IN ('pending', 'failed');
CREATE INDEX courier_outbox_status_created
    ON courier_outbox (status, created_at);
CREATE INDEX courier_outbox_published
    ON courier_outbox (published_at)
    WHERE status = 'published';

CREATE FUNCTION courier_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('courier_outbox', TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME);
    RETURN NULL;
END
$$;

CREATE TRIGGER courier_outbox_notify
    AFTER INSERT ON courier_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION courier_outbox_notify();

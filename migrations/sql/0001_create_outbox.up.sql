-- courier outbox table, version 1.
--
-- Plain SQL: it creates courier_outbox in the current schema (search_path), so a
-- team running its own migration tool can apply it as-is. courier's Go API
-- (migrations.Migrator) applies the same file into a configured schema and may
-- rename courier_outbox.

CREATE TABLE courier_outbox (
    -- identity and ordering
    id               uuid        PRIMARY KEY,
    seq              bigint      GENERATED ALWAYS AS IDENTITY,

    -- routing
    topic            text        NOT NULL CHECK (topic <> ''),
    partition_key    text,
    event_type       text        NOT NULL CHECK (event_type <> ''),

    -- CloudEvents extensions
    aggregate_type   text,
    aggregate_id     text,
    tenant_id        text,
    correlation_id   text,
    causation_id     text,
    idempotency_key  text,

    -- the record
    payload          bytea       NOT NULL,
    content_type     text        NOT NULL,
    headers          jsonb       NOT NULL DEFAULT '{}'::jsonb,

    -- delivery state
    status           text        NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'failed', 'published', 'dead_lettered')),
    retry_count      integer     NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    max_retries      integer     CHECK (max_retries >= 0),
    last_error       text,
    last_attempt_at  timestamptz,
    first_failed_at  timestamptz,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    published_at     timestamptz,

    CONSTRAINT courier_outbox_seq_key UNIQUE (seq)
);

-- A queue table churns: keep its planner statistics fresh (so the claim is
-- planned for the backlog it finds) and its dead tuples few.
ALTER TABLE courier_outbox SET (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);

-- Idempotency: one event per (topic, idempotency key).
CREATE UNIQUE INDEX courier_outbox_idempotency_key
    ON courier_outbox (topic, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- The relay's claim: unfinished events in insert order.
CREATE INDEX courier_outbox_claim
    ON courier_outbox (seq)
    WHERE status IN ('pending', 'failed');

-- Per-key order: the unfinished events of a (topic, key) in insert order.
CREATE INDEX courier_outbox_key_order
    ON courier_outbox (topic, partition_key, seq)
    WHERE status <> 'published';

-- Per-key order: the few events that can hold their key back (waiting for a
-- retry, scheduled for later, or dead-lettered), so the claim skips the
-- events queued behind them without scanning those queues.
CREATE INDEX courier_outbox_blockers
    ON courier_outbox (topic, partition_key, seq)
    WHERE status IN ('failed', 'dead_lettered') OR next_attempt_at > created_at;

-- Age of the oldest due event.
CREATE INDEX courier_outbox_due
    ON courier_outbox (next_attempt_at)
    WHERE status IN ('pending', 'failed');

-- Admin queries: events by status and time.
CREATE INDEX courier_outbox_status_created
    ON courier_outbox (status, created_at);

-- Retention: published events by age.
CREATE INDEX courier_outbox_published
    ON courier_outbox (published_at)
    WHERE status = 'published';

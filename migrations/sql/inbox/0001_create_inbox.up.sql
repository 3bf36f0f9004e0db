-- courier inbox table, version 1.
--
-- The ids of the messages a consumer processed, per scope (usually the
-- consumer group). A handler records a message's id in the same transaction
-- as its own writes (dedupe.Inbox.Record), so that the writes and the id
-- commit or roll back together: a redelivered message finds its id and is
-- skipped.
--
-- Plain SQL: it creates courier_inbox in the current schema (search_path), so a
-- team running its own migration tool can apply it as-is. courier's Go API
-- (migrations.NewInbox) applies the same file into a configured schema and may
-- rename courier_inbox.

CREATE TABLE courier_inbox (
    scope        text        NOT NULL CHECK (scope <> ''),
    id           text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT courier_inbox_pkey PRIMARY KEY (scope, id)
);

-- Cleanup: a scope's ids by age, so that deleting those older than the
-- window reads only them.
CREATE INDEX courier_inbox_processed
    ON courier_inbox (scope, processed_at);

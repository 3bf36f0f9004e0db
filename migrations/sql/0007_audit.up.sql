-- The audit log of an operator's console: who did what to the outbox,
-- when, from where, on which events (the filter, as JSON) and to how many.
-- Only the console writes and reads it (producer.Admin.Audit and
-- AuditLog); a relay never touches it and starts without it.

CREATE TABLE courier_outbox_audit (
    id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT now(),
    actor  text        NOT NULL,
    remote text        NOT NULL DEFAULT '',
    action text        NOT NULL,
    target text        NOT NULL DEFAULT '',
    filter jsonb,
    count  bigint      NOT NULL DEFAULT 0,
    detail text        NOT NULL DEFAULT ''
);

-- Reverts 0007_audit.up.sql: the audit log is lost.
DROP TABLE courier_outbox_audit;

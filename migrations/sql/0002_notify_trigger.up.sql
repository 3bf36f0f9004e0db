-- Wakes idle relays: every statement that inserts into courier_outbox sends
-- one NOTIFY on the channel courier_outbox when its transaction commits. The
-- payload is the table's schema-qualified name, so relays of other schemas
-- can ignore it. Relays that cannot LISTEN (PgBouncer in transaction mode)
-- poll instead; the notification then costs nothing.

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

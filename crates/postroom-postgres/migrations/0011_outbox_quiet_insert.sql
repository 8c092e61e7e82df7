-- A producer that sends its own rows right after its commit (`outbox::enqueue_to_send`) has no
-- work for the relays: its insert sets `postroom.outbox_quiet` to this outbox's channel for the
-- statement, and the statement that leases the rows notifies the relays itself when it leaves
-- rows to them. Every other insert wakes the relays as before.
CREATE OR REPLACE FUNCTION {prefix}outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('postroom.outbox_quiet', true), '') <> TG_TABLE_SCHEMA || '.{prefix}outbox' THEN
        PERFORM pg_notify(TG_TABLE_SCHEMA || '.{prefix}outbox', '');
    END IF;
    RETURN NULL;
END
$$;

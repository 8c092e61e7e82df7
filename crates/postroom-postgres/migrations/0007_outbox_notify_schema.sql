-- The NOTIFY channel names the schema the outbox lives in (`<schema>.<prefix>outbox`), so
-- installations with one prefix in two schemas of one database do not wake each other.
CREATE OR REPLACE FUNCTION {prefix}outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '.{prefix}outbox', '');
    RETURN NULL;
END
$$;

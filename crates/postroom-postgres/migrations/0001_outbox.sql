-- The transactional outbox (R2, R3). Rows are written in the user's business transaction,
-- claimed by relays with leases, and marked published only after the broker's confirm.
CREATE TABLE {prefix}outbox (
    seq              BIGSERIAL PRIMARY KEY,
    id               UUID        NOT NULL UNIQUE,
    aggregate_key    TEXT        NOT NULL,
    route_kind       TEXT        NOT NULL CHECK (route_kind IN ('topic', 'consumer')),
    route            TEXT        NOT NULL,
    headers          JSONB       NOT NULL DEFAULT '{}',
    body             BYTEA       NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    available_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_by        TEXT,
    locked_until     TIMESTAMPTZ,
    publish_attempts INTEGER     NOT NULL DEFAULT 0,
    last_error       TEXT,
    published_at     TIMESTAMPTZ
);

-- The head of each aggregate among unpublished rows (per-aggregate order).
CREATE INDEX {prefix}outbox_unpublished_agg ON {prefix}outbox (aggregate_key, seq) WHERE published_at IS NULL;
-- Claim order.
CREATE INDEX {prefix}outbox_unpublished_seq ON {prefix}outbox (seq) WHERE published_at IS NULL;
-- Retention.
CREATE INDEX {prefix}outbox_published_at ON {prefix}outbox (published_at) WHERE published_at IS NOT NULL;

-- New rows wake the relays (LISTEN {prefix}outbox); polling stays as the fallback.
CREATE FUNCTION {prefix}outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{prefix}outbox', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER {prefix}outbox_notify AFTER INSERT ON {prefix}outbox
    FOR EACH STATEMENT EXECUTE FUNCTION {prefix}outbox_notify();

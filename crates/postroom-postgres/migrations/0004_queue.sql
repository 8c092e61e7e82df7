-- PgQueue: a queue transport in tables, so postroom runs on PostgreSQL alone.
CREATE TABLE {prefix}subscriptions (
    consumer TEXT NOT NULL,
    pattern  TEXT NOT NULL,
    -- The AMQP topic pattern as a PostgreSQL regular expression (`*` one word, `#` any).
    regex    TEXT NOT NULL,
    PRIMARY KEY (consumer, pattern)
);

CREATE TABLE {prefix}queue (
    id             BIGSERIAL PRIMARY KEY,
    consumer       TEXT        NOT NULL,
    message_id     UUID        NOT NULL,
    routing_key    TEXT        NOT NULL,
    headers        JSONB       NOT NULL DEFAULT '{}',
    body           BYTEA       NOT NULL,
    attempt        INTEGER     NOT NULL DEFAULT 0,
    visible_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    lease_owner    TEXT,
    lease_token    UUID,
    leased_until   TIMESTAMPTZ,
    enqueued_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    delivery_count INTEGER     NOT NULL DEFAULT 0
);

CREATE INDEX {prefix}queue_ready ON {prefix}queue (consumer, visible_at, id);

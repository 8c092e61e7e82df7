-- Inbox-queue mode (R6, seed 003): the subscriber only stores the message here and acks;
-- workers claim rows with `locked_until` leases and process them in parallel.
CREATE TABLE {prefix}inbox_queue (
    id           BIGSERIAL PRIMARY KEY,
    consumer     TEXT        NOT NULL,
    message_id   UUID        NOT NULL,
    routing_key  TEXT        NOT NULL,
    headers      JSONB       NOT NULL DEFAULT '{}',
    body         BYTEA       NOT NULL,
    -- Ordered mode: a monotonic sequence per key (the aggregate version), NULL when unordered.
    order_key    TEXT,
    order_seq    BIGINT,
    status       TEXT        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'parked')),
    attempts     INTEGER     NOT NULL DEFAULT 0,
    available_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_by    TEXT,
    locked_until TIMESTAMPTZ,
    last_error   TEXT,
    gap_since    TIMESTAMPTZ,
    received_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    done_at      TIMESTAMPTZ,
    UNIQUE (consumer, message_id)
);

CREATE INDEX {prefix}inbox_queue_pending ON {prefix}inbox_queue (consumer, available_at, id) WHERE status = 'pending';
CREATE INDEX {prefix}inbox_queue_key ON {prefix}inbox_queue (consumer, order_key, order_seq) WHERE status = 'pending';
CREATE INDEX {prefix}inbox_queue_done ON {prefix}inbox_queue (done_at) WHERE status = 'done';

-- Ordered mode: the last sequence applied per key.
CREATE TABLE {prefix}inbox_queue_keys (
    consumer  TEXT   NOT NULL,
    order_key TEXT   NOT NULL,
    last_seq  BIGINT NOT NULL,
    PRIMARY KEY (consumer, order_key)
);

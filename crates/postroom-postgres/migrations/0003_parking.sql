-- The parking lot (R11) and redrive bookkeeping (R12).
CREATE TABLE {prefix}parked (
    consumer         TEXT        NOT NULL,
    message_id       UUID        NOT NULL,
    consumer_version TEXT        NOT NULL,
    message_type     TEXT,
    schema_version   INTEGER,
    attempts         INTEGER     NOT NULL,
    first_failure_at TIMESTAMPTZ NOT NULL,
    parked_at        TIMESTAMPTZ NOT NULL,
    error_class      TEXT        NOT NULL,
    error_code       TEXT        NOT NULL,
    error_message    TEXT        NOT NULL,
    correlation_id   TEXT,
    traceparent      TEXT,
    routing_key      TEXT        NOT NULL,
    producer         TEXT,
    headers          JSONB       NOT NULL DEFAULT '{}',
    body             BYTEA       NOT NULL,
    status           TEXT        NOT NULL CHECK (status IN ('parked', 'redriven')),
    redrive_count    INTEGER     NOT NULL DEFAULT 0,
    PRIMARY KEY (consumer, message_id)
);

CREATE INDEX {prefix}parked_parked_at ON {prefix}parked (parked_at);
CREATE INDEX {prefix}parked_message_id ON {prefix}parked (message_id);

CREATE TABLE {prefix}redrive_runs (
    id         TEXT        PRIMARY KEY,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    operator   TEXT        NOT NULL,
    filter     TEXT        NOT NULL,
    total      BIGINT      NOT NULL,
    done       BIGINT      NOT NULL DEFAULT 0
);

-- The ids a run selected, in order; done_at set once each was sent back (resumable audit).
CREATE TABLE {prefix}redrive_items (
    run_id     TEXT        NOT NULL REFERENCES {prefix}redrive_runs (id) ON DELETE CASCADE,
    position   INTEGER     NOT NULL,
    consumer   TEXT        NOT NULL,
    message_id UUID        NOT NULL,
    done_at    TIMESTAMPTZ,
    PRIMARY KEY (run_id, consumer, message_id)
);

CREATE INDEX {prefix}redrive_items_pending ON {prefix}redrive_items (run_id, position) WHERE done_at IS NULL;

-- Outbox: written in the business transaction, claimed by relays with leases.
CREATE TABLE postroom_outbox (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id       TEXT    NOT NULL UNIQUE,
    route_kind       TEXT    NOT NULL CHECK (route_kind IN ('topic', 'consumer')),
    route            TEXT    NOT NULL,
    headers          TEXT    NOT NULL,
    body             BLOB    NOT NULL,
    aggregate_key    TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    available_at     INTEGER NOT NULL,
    locked_by        TEXT,
    locked_until     INTEGER,
    publish_attempts INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT,
    published_at     INTEGER
);
CREATE INDEX postroom_outbox_unpublished ON postroom_outbox (aggregate_key, seq) WHERE published_at IS NULL;
CREATE INDEX postroom_outbox_published ON postroom_outbox (published_at) WHERE published_at IS NOT NULL;

-- Inbox: one row per (consumer, message) claimed in the business transaction.
CREATE TABLE postroom_inbox (
    consumer     TEXT    NOT NULL,
    message_id   TEXT    NOT NULL,
    processed_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, message_id)
) WITHOUT ROWID;
CREATE INDEX postroom_inbox_processed ON postroom_inbox (processed_at);

-- Embedded queue: topic subscriptions and one row per (consumer, message) copy.
CREATE TABLE postroom_subscriptions (
    consumer TEXT NOT NULL,
    pattern  TEXT NOT NULL,
    PRIMARY KEY (consumer, pattern)
) WITHOUT ROWID;

CREATE TABLE postroom_queue (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer     TEXT    NOT NULL,
    message_id   TEXT,
    routing_key  TEXT    NOT NULL,
    headers      TEXT    NOT NULL,
    body         BLOB    NOT NULL,
    enqueued_at  INTEGER NOT NULL,
    visible_at   INTEGER NOT NULL,
    stage        INTEGER,
    lease_token  TEXT,
    leased_until INTEGER,
    deliveries   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX postroom_queue_ready ON postroom_queue (consumer, visible_at, seq);

-- Parking lot with every diagnostic, and the redrive audit.
CREATE TABLE postroom_parking (
    consumer         TEXT    NOT NULL,
    message_id       TEXT    NOT NULL,
    consumer_version TEXT    NOT NULL,
    message_type     TEXT,
    schema_version   INTEGER,
    attempts         INTEGER NOT NULL,
    first_failure_at INTEGER NOT NULL,
    parked_at        INTEGER NOT NULL,
    error_class      TEXT    NOT NULL,
    error_code       TEXT    NOT NULL,
    error_message    TEXT    NOT NULL,
    correlation_id   TEXT,
    traceparent      TEXT,
    routing_key      TEXT    NOT NULL,
    producer         TEXT,
    headers          TEXT    NOT NULL,
    body             BLOB    NOT NULL,
    status           TEXT    NOT NULL,
    redrive_count    INTEGER NOT NULL DEFAULT 0,
    redriven_at      INTEGER,
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX postroom_parking_parked_at ON postroom_parking (parked_at);
CREATE INDEX postroom_parking_message ON postroom_parking (message_id);

CREATE TABLE postroom_redrive_runs (
    id         TEXT    PRIMARY KEY,
    created_at INTEGER NOT NULL,
    operator   TEXT    NOT NULL,
    filter     TEXT    NOT NULL,
    total      INTEGER NOT NULL
);
CREATE TABLE postroom_redrive_items (
    run_id     TEXT    NOT NULL,
    consumer   TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    done_at    INTEGER,
    PRIMARY KEY (run_id, consumer, message_id)
) WITHOUT ROWID;

-- The inbox (R5): one row per (consumer, message id) processed, claimed in the same
-- transaction as the business effect. Purged only after the replay window.
CREATE TABLE {prefix}inbox (
    consumer     TEXT        NOT NULL,
    message_id   UUID        NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);

CREATE INDEX {prefix}inbox_processed_at ON {prefix}inbox (processed_at);

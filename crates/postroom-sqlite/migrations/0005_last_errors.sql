-- The last error a consumer recorded for each message it has not settled yet, kept apart
-- from the message: a broker that dead-letters a message by itself (SQS after
-- maxReceiveCount) moves a copy with none of the consumer's diagnostics, and whoever ingests
-- that copy, in any process, joins it with this row. A row goes when its message is settled.
CREATE TABLE postroom_last_errors (
    consumer         TEXT    NOT NULL,
    message_id       TEXT    NOT NULL,
    first_failure_at INTEGER NOT NULL,
    at               INTEGER NOT NULL,
    class            TEXT    NOT NULL,
    code             TEXT    NOT NULL,
    message          TEXT    NOT NULL,
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX postroom_last_errors_at ON postroom_last_errors (at);

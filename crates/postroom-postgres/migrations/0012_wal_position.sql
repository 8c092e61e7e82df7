-- Where each WAL relay's replication slot stands, written by the relay at most once a second
-- (never per message). `published_seq`: the outbox rows up to this sequence number that the
-- slot had passed are published, so retention may delete them in bulk, and a slot that is
-- lost is recovered by republishing the rows after it. A row here also says that the slot
-- was created once: a slot missing later was dropped, not never made.
CREATE TABLE {prefix}wal_position (
    slot          TEXT        PRIMARY KEY,
    confirmed_lsn PG_LSN      NOT NULL,
    published_seq BIGINT      NOT NULL DEFAULT 0,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- What the operations console keeps beside the parking lot: archived copies (hidden from
-- listings, purged once their retention ends; a copy is named by its parked_at, so a message
-- parked again later is shown again), the live state of redrive runs it drives, and an audit
-- of every state change.
CREATE TABLE {prefix}parked_archive (
    consumer     TEXT        NOT NULL,
    message_id   UUID        NOT NULL,
    parked_at    TIMESTAMPTZ NOT NULL,
    archived_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    archived_by  TEXT        NOT NULL,
    purge_after  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX {prefix}parked_archive_purge ON {prefix}parked_archive (purge_after);

CREATE TABLE {prefix}redrive_control (
    run_id      TEXT             PRIMARY KEY,
    state       TEXT             NOT NULL,
    rate        DOUBLE PRECISION NOT NULL,
    group_key   TEXT,
    started_by  TEXT             NOT NULL,
    started_at  TIMESTAMPTZ      NOT NULL,
    updated_at  TIMESTAMPTZ      NOT NULL,
    joined      BIGINT           NOT NULL DEFAULT 0,
    error       TEXT
);

CREATE TABLE {prefix}audit (
    id      BIGSERIAL   PRIMARY KEY,
    at      TIMESTAMPTZ NOT NULL,
    actor   TEXT        NOT NULL,
    action  TEXT        NOT NULL,
    target  TEXT        NOT NULL,
    detail  JSONB       NOT NULL
);
CREATE INDEX {prefix}audit_target ON {prefix}audit (target, id);

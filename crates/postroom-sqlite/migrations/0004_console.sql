-- What the operations console keeps beside the parking lot: which parked copies an operator
-- archived (hidden from listings, purged once their retention ends), the live state of redrive
-- runs it drives (paused, cancelled, finished), and an audit of every state change.

-- An archived copy is identified by its parked_at: parking the same message again later gives
-- it a new parked_at, and the new copy is not archived.
CREATE TABLE postroom_parking_archive (
    consumer     TEXT    NOT NULL,
    message_id   TEXT    NOT NULL,
    parked_at    INTEGER NOT NULL,
    archived_at  INTEGER NOT NULL,
    archived_by  TEXT    NOT NULL,
    purge_after  INTEGER NOT NULL,
    PRIMARY KEY (consumer, message_id)
) WITHOUT ROWID;
CREATE INDEX postroom_parking_archive_purge ON postroom_parking_archive (purge_after);

CREATE TABLE postroom_redrive_control (
    run_id      TEXT    PRIMARY KEY,
    state       TEXT    NOT NULL,
    rate        REAL    NOT NULL,
    group_key   TEXT,
    started_by  TEXT    NOT NULL,
    started_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    joined      INTEGER NOT NULL DEFAULT 0,
    error       TEXT
);

CREATE TABLE postroom_audit (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      INTEGER NOT NULL,
    actor   TEXT    NOT NULL,
    action  TEXT    NOT NULL,
    target  TEXT    NOT NULL,
    detail  TEXT    NOT NULL
);
CREATE INDEX postroom_audit_at ON postroom_audit (at);

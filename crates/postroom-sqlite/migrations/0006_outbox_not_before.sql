-- Scheduled sends: a row with `not_before` (Unix milliseconds) is not claimed before that time.
-- Such a row is ordered under its own id, so it neither waits behind its aggregate's other rows
-- nor holds them back. Unscheduled rows keep `not_before` NULL.
ALTER TABLE postroom_outbox ADD COLUMN not_before INTEGER;
-- Claims walk the unscheduled rows in insertion order and the scheduled ones by due time, so
-- rows not yet due are never scanned.
DROP INDEX IF EXISTS postroom_outbox_pending_seq;
CREATE INDEX postroom_outbox_pending_seq ON postroom_outbox (seq) WHERE published_at IS NULL AND not_before IS NULL;
CREATE INDEX postroom_outbox_scheduled ON postroom_outbox (not_before) WHERE published_at IS NULL AND not_before IS NOT NULL;

-- Scheduled sends: a row with `not_before` is not claimed before that time (and the WAL relay
-- leaves it to its timer instead of publishing it from the log). Such a row is ordered under
-- its own id, so it neither waits behind its aggregate's other rows nor holds them back.
-- Unscheduled rows keep `not_before` NULL (adding the column rewrites nothing).
ALTER TABLE {prefix}outbox ADD COLUMN not_before TIMESTAMPTZ;
-- Claims walk the unscheduled rows in insertion order and the scheduled ones by due time, so
-- rows not yet due are never scanned.
DROP INDEX IF EXISTS {prefix}outbox_unpublished_seq;
CREATE INDEX {prefix}outbox_unpublished_seq ON {prefix}outbox (seq) WHERE published_at IS NULL AND not_before IS NULL;
CREATE INDEX {prefix}outbox_scheduled ON {prefix}outbox (not_before) WHERE published_at IS NULL AND not_before IS NOT NULL;

-- Relays claim unpublished rows in insertion order: walk them through a partial index instead
-- of scanning every published row (the claim holds the write lock while it runs).
CREATE INDEX IF NOT EXISTS postroom_outbox_pending_seq ON postroom_outbox (seq) WHERE published_at IS NULL;

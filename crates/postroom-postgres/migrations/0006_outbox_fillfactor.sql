-- Leave room on each outbox page so that a relay's claim (it changes only the lease columns,
-- which no index covers) is a HOT update: no new index entries, no dead ones for the next
-- claim to walk over.
ALTER TABLE {prefix}outbox SET (fillfactor = 50);

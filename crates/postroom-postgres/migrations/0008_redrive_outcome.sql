-- What became of each message a redrive run selected: 'redriven' (sent back), or why it was
-- not (already applied by its consumer, older than the inbox's replay window).
ALTER TABLE {prefix}redrive_items ADD COLUMN outcome TEXT;

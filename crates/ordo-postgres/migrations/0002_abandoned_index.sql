-- The PostgreSQL outbox, version 2: abandoned rows are found by an index of
-- their own, so the status (pending, oldest pending, abandoned) reads two
-- small partial indexes instead of scanning every published row kept for
-- the retention (a scan that took ~100 ms on a 200,000-row outbox).
CREATE INDEX IF NOT EXISTS outbox_abandoned ON {schema}.outbox (id) WHERE status = 2;

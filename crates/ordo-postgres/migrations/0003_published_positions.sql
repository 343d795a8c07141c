-- The PostgreSQL outbox, version 3: a scope's rows are published up to a
-- position, kept on its `outbox_streams` row, instead of row by row. A
-- scope's positions are gapless and published in order, so "every row at or
-- below `published_seq` is published" says the same as a status per row,
-- with one UPDATE per scope and batch instead of a new version of every row
-- (and of its index entries). `outbox.status` now only tells abandoned rows
-- (2) from the others (0); rows marked 1 by version 2 count as published by
-- position. See docs/POSTGRES.md.

-- Writers take positions under this lock; once it is held, every committed
-- row is visible to the statements below and no writer adds one until this
-- migration commits.
LOCK TABLE {schema}.outbox_streams IN EXCLUSIVE MODE;

ALTER TABLE {schema}.outbox_streams ADD COLUMN published_seq int8 NOT NULL DEFAULT 0;

-- Published up to the position before the scope's first pending row, or
-- all of it when none is pending (published rows may have been deleted
-- already by the retention).
UPDATE {schema}.outbox_streams s SET published_seq = coalesce(
    (SELECT min(o.seq) - 1 FROM {schema}.outbox o WHERE o.stream = s.stream AND o.status = 0),
    s.last_seq);
UPDATE {schema}.outbox SET status = 0 WHERE status = 1;

-- The scopes with rows above their published position, per relay slot:
-- what a relay's fetch starts from.
CREATE INDEX outbox_streams_pending ON {schema}.outbox_streams (slot) WHERE last_seq > published_seq;

-- Rows are no longer updated when published: the per-row indexes of the
-- status go, and the retention finds old rows by their creation time.
DROP INDEX {schema}.outbox_pending;
DROP INDEX {schema}.outbox_published;
CREATE INDEX outbox_created ON {schema}.outbox (created_at);

-- The PostgreSQL outbox, version 4: the outbox's identity, scopes the
-- broker refused, and dead letters replayed through the fence. See
-- docs/POSTGRES.md.

-- One row: a random id made when the outbox is created. Every publication
-- carries an epoch derived from it and from what changes when the
-- database's history forks (its timeline, the database's and schema's
-- OIDs), so Redis can tell a position of this history from the same
-- position of another one (a restore, a point-in-time recovery, a promoted
-- asynchronous replica, a re-created schema, a fresh database).
CREATE TABLE {schema}.outbox_identity (
    id         text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO {schema}.outbox_identity (id)
    VALUES (md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text));

-- A scope whose next row the broker refused (a category it partitions
-- otherwise, a position it holds from another history): why, until when
-- relays leave it out of their fetches, and, for another history's
-- position, the broker's last position of the scope (what `adopt`
-- continues from). Cleared when the scope's position moves on.
ALTER TABLE {schema}.outbox_streams
    ADD COLUMN refused       text,
    ADD COLUMN refused_until timestamptz,
    ADD COLUMN broker_seq    int8;

-- Dead letters replayed by an operator pass the fence once per handler and
-- message id (they carry no position).
CREATE TABLE {schema}.applied_replays (
    consumer      text NOT NULL,
    scope         text NOT NULL,
    message_id    text NOT NULL,
    fencing_token int8 NOT NULL,
    applied_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, scope, message_id)
);

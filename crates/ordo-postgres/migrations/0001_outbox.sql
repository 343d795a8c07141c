-- The PostgreSQL outbox, version 1. `{schema}` is the configured schema
-- (quoted), `{slots}` the number of relay slots. See docs/POSTGRES.md.

-- One row per position scope (a partition lane, or an unpartitioned
-- category): the last position handed out. A committing transaction
-- upserts it, which row-locks it until commit, so transactions on one scope
-- take positions one after another, in commit order, without gaps.
CREATE TABLE {schema}.outbox_streams (
    stream   text PRIMARY KEY,
    slot     int4 NOT NULL,
    last_seq int8 NOT NULL
);

-- The rows. `id` is only an identity (a BIGSERIAL is not commit order);
-- `(stream, seq)` is the order a scope's rows are published in.
-- status: 0 pending, 1 published, 2 abandoned.
CREATE TABLE {schema}.outbox (
    id            bigserial PRIMARY KEY,
    stream        text NOT NULL,
    seq           int8 NOT NULL,
    slot          int4 NOT NULL,
    message_id    text NOT NULL,
    category      text NOT NULL,
    type_name     text NOT NULL,
    partition_key text,
    lane          int2 NOT NULL,
    envelope      text NOT NULL,
    status        int2 NOT NULL DEFAULT 0,
    attempts      int4 NOT NULL DEFAULT 0,
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    published_at  timestamptz,
    UNIQUE (stream, seq)
);
CREATE INDEX outbox_pending ON {schema}.outbox (id) WHERE status = 0;
CREATE INDEX outbox_published ON {schema}.outbox (published_at) WHERE status = 1;

-- Relay ownership: each slot is leased by at most one relay at a time.
CREATE TABLE {schema}.outbox_slots (
    slot       int4 PRIMARY KEY,
    owner      text,
    token      int8 NOT NULL DEFAULT 0,
    expires_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO {schema}.outbox_slots (slot) SELECT generate_series(0, {slots} - 1);

-- Live relays, for fair shares of the slots.
CREATE TABLE {schema}.outbox_relays (
    id         text PRIMARY KEY,
    expires_at timestamptz NOT NULL
);

-- Exactly-once effects: per handler and position scope, the last applied
-- position and the fencing token it was applied under.
CREATE TABLE {schema}.applied (
    consumer      text NOT NULL,
    scope         text NOT NULL,
    position      int8 NOT NULL,
    fencing_token int8 NOT NULL,
    message_id    text NOT NULL DEFAULT '',
    applied_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, scope)
);

-- Process-manager state, fenced by the lease's token.
CREATE TABLE {schema}.process_states (
    manager       text NOT NULL,
    correlation   text NOT NULL,
    state         text NOT NULL,
    fencing_token int8 NOT NULL,
    saved_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (manager, correlation)
);

//! The tables, their embedded migrations, and the SQL text of every query,
//! rendered once for the configured schema.

use std::sync::Arc;

use sqlx::{Executor, PgPool};

use crate::error::{Error, Result};

/// The schema used when none is configured.
pub const DEFAULT_SCHEMA: &str = "ordo";

/// How many relay slots partition scopes are hashed into. Relays own slots,
/// not single keys, so ownership stays bounded whatever the number of keys.
/// Fixed by the first migration (changing it would move keys between slots).
pub(crate) const SLOTS: i32 = 64;

/// The migrations, in order; `{schema}` is replaced by the quoted schema name.
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("../migrations/0001_outbox.sql")),
    (2, include_str!("../migrations/0002_abandoned_index.sql")),
];

/// A validated schema name and the SQL text of every query in it.
#[derive(Debug, Clone)]
pub(crate) struct Schema {
    name: String,
    pub(crate) sql: Arc<Sql>,
}

/// Every query, rendered for one schema.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) upsert_streams: Arc<str>,
    pub(crate) insert_rows: Arc<str>,
    pub(crate) pending: Arc<str>,
    pub(crate) mark_published: Arc<str>,
    pub(crate) mark_failed: Arc<str>,
    pub(crate) mark_abandoned: Arc<str>,
    pub(crate) get: Arc<str>,
    pub(crate) register_relay: Arc<str>,
    pub(crate) live_relays: Arc<str>,
    pub(crate) renew_slots: Arc<str>,
    pub(crate) release_slots: Arc<str>,
    pub(crate) acquire_slots: Arc<str>,
    pub(crate) forget_relay: Arc<str>,
    pub(crate) cleanup: Arc<str>,
    pub(crate) status: Arc<str>,
    pub(crate) fence_insert: Arc<str>,
    pub(crate) fence_lock: Arc<str>,
    pub(crate) fence_update: Arc<str>,
    pub(crate) process_load: Arc<str>,
    pub(crate) process_save: Arc<str>,
}

/// The columns `pending` and `get` read, in [`crate::outbox::read_row`]'s order.
const ROW_COLUMNS: &str = "id, stream, seq, envelope, partition_key, lane, status, attempts, last_error, \
     (extract(epoch from created_at) * 1000000)::int8 AS created_us";

impl Schema {
    /// `name` if it is a plain lower-case identifier (`[a-z_][a-z0-9_]*`, at
    /// most 63 bytes), so it can be written into SQL text safely.
    pub(crate) fn new(name: &str) -> Result<Self> {
        let valid = !name.is_empty()
            && name.len() <= 63
            && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(Error::Config {
                key: "schema",
                reason: format!(
                    "{name:?} is not a plain lower-case identifier ([a-z_][a-z0-9_]*, at most 63 bytes)"
                ),
            });
        }
        let s = format!("\"{name}\"");
        let q = |text: &str| -> Arc<str> { text.replace("{s}", &s).into() };
        let sql = Sql {
            upsert_streams: q("INSERT INTO {s}.outbox_streams (stream, slot, last_seq) \
                 SELECT * FROM UNNEST($1::text[], $2::int4[], $3::int8[]) \
                 ON CONFLICT (stream) DO UPDATE SET last_seq = {s}.outbox_streams.last_seq + EXCLUDED.last_seq \
                 RETURNING stream, last_seq"),
            insert_rows: q(
                "INSERT INTO {s}.outbox (stream, seq, slot, message_id, category, type_name, partition_key, lane, envelope) \
                 SELECT * FROM UNNEST($1::text[], $2::int8[], $3::int4[], $4::text[], $5::text[], $6::text[], \
                 $7::text[], $8::int2[], $9::text[]) \
                 RETURNING id, stream, seq",
            ),
            pending: q(&format!(
                "SELECT {ROW_COLUMNS} FROM {{s}}.outbox \
                 WHERE status = 0 AND slot = ANY(ARRAY(\
                 SELECT slot FROM {{s}}.outbox_slots WHERE owner = $1 AND expires_at > now())) \
                 AND id <> ALL($3::int8[]) ORDER BY id LIMIT $2"
            )),
            mark_published: q(
                "UPDATE {s}.outbox SET status = 1, published_at = now() WHERE id = ANY($1) AND status = 0",
            ),
            mark_failed: q(
                "UPDATE {s}.outbox SET attempts = attempts + 1, last_error = $2 WHERE id = $1 AND status = 0 \
                 RETURNING id",
            ),
            mark_abandoned: q(
                "UPDATE {s}.outbox SET status = 2, last_error = $2 WHERE id = $1 AND status = 0 RETURNING id",
            ),
            get: q(&format!("SELECT {ROW_COLUMNS} FROM {{s}}.outbox WHERE id = $1")),
            register_relay: q(
                "INSERT INTO {s}.outbox_relays (id, expires_at) VALUES ($1, now() + $2 * interval '1 millisecond') \
                 ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at",
            ),
            live_relays: q("SELECT count(*) FROM {s}.outbox_relays WHERE expires_at > now()"),
            renew_slots: q(
                "UPDATE {s}.outbox_slots SET expires_at = now() + $2 * interval '1 millisecond' \
                 WHERE owner = $1 AND expires_at > now() RETURNING slot",
            ),
            release_slots: q(
                "UPDATE {s}.outbox_slots SET owner = NULL, expires_at = now() WHERE owner = $1 AND slot = ANY($2)",
            ),
            acquire_slots: q("UPDATE {s}.outbox_slots SET owner = $1, token = token + 1, \
                 expires_at = now() + $2 * interval '1 millisecond' \
                 WHERE slot IN (SELECT slot FROM {s}.outbox_slots \
                 WHERE owner IS NULL OR expires_at <= now() ORDER BY random() LIMIT $3 FOR UPDATE SKIP LOCKED) \
                 RETURNING slot"),
            forget_relay: q(
                "WITH released AS (UPDATE {s}.outbox_slots SET owner = NULL, expires_at = now() WHERE owner = $1) \
                 DELETE FROM {s}.outbox_relays WHERE id = $1 OR expires_at < now() - interval '1 hour'",
            ),
            cleanup: q(
                "DELETE FROM {s}.outbox WHERE id IN (SELECT id FROM {s}.outbox WHERE status = 1 \
                 AND published_at < now() - $1 * interval '1 millisecond' LIMIT $2)",
            ),
            // One sub-select per partial index: a filter over `status IN (0, 2)`
            // scans the whole table, published rows included. The oldest
            // pending row is the first by id (its `created_at` is its
            // transaction's start, so off by at most a transaction's length).
            status: q("SELECT (SELECT count(*) FROM {s}.outbox WHERE status = 0), \
                 coalesce((SELECT extract(epoch from now() - created_at) FROM {s}.outbox WHERE status = 0 \
                 ORDER BY id LIMIT 1), 0)::float8, \
                 (SELECT count(*) FROM {s}.outbox WHERE status = 2), \
                 (SELECT count(*) FROM {s}.outbox_relays WHERE expires_at > now()), \
                 (SELECT count(*) FROM {s}.outbox_slots WHERE owner IS NOT NULL AND expires_at > now())"),
            fence_insert: q(
                "INSERT INTO {s}.applied (consumer, scope, position, fencing_token) VALUES ($1, $2, 0, 0) \
                 ON CONFLICT (consumer, scope) DO NOTHING",
            ),
            fence_lock: q(
                "SELECT position, fencing_token FROM {s}.applied WHERE consumer = $1 AND scope = $2 FOR UPDATE",
            ),
            fence_update: q(
                "UPDATE {s}.applied SET position = $3, fencing_token = $4, message_id = $5, applied_at = now() \
                 WHERE consumer = $1 AND scope = $2",
            ),
            process_load: q("SELECT state FROM {s}.process_states WHERE manager = $1 AND correlation = $2"),
            process_save: q(
                "INSERT INTO {s}.process_states (manager, correlation, state, fencing_token) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (manager, correlation) DO UPDATE \
                 SET state = EXCLUDED.state, fencing_token = EXCLUDED.fencing_token, saved_at = now() \
                 WHERE {s}.process_states.fencing_token <= EXCLUDED.fencing_token \
                 RETURNING fencing_token",
            ),
        };
        Ok(Self {
            name: name.to_owned(),
            sql: Arc::new(sql),
        })
    }

    /// The schema name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The NOTIFY channel relays listen on.
    pub(crate) fn channel(&self) -> String {
        format!("{}_outbox", self.name)
    }

    /// Applies the migrations not applied yet, each in its own transaction,
    /// under an advisory lock so concurrent callers apply each once.
    pub(crate) async fn migrate(&self, pool: &PgPool) -> Result<()> {
        let quoted = format!("\"{}\"", self.name);
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('ordo-migrate:' || $1))")
            .bind(&self.name)
            .execute(&mut *tx)
            .await?;
        tx.execute(sqlx::AssertSqlSafe(format!(
            "CREATE SCHEMA IF NOT EXISTS {quoted}; \
             CREATE TABLE IF NOT EXISTS {quoted}.migrations \
             (version int4 PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )))
        .await?;
        let applied: Vec<i32> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT version FROM {quoted}.migrations"
        )))
        .fetch_all(&mut *tx)
        .await?;
        for (version, text) in MIGRATIONS {
            if applied.contains(version) {
                continue;
            }
            let text = text
                .replace("{schema}", &quoted)
                .replace("{slots}", &SLOTS.to_string());
            tx.execute(sqlx::AssertSqlSafe(text)).await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {quoted}.migrations (version) VALUES ($1)"
            )))
            .bind(version)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// The relay slot of a position scope: FNV-1a of its bytes, modulo [`SLOTS`].
/// Stable across versions and processes (it is stored with every row).
pub(crate) fn slot_of(scope: &str) -> i32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in scope.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    i32::try_from(hash % SLOTS.unsigned_abs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_must_be_plain_identifiers() {
        assert!(Schema::new("ordo").is_ok());
        assert!(Schema::new("bank_2").is_ok());
        for bad in [
            "",
            "Ordo",
            "a-b",
            "x\"; DROP TABLE t; --",
            "1abc",
            &"a".repeat(64),
        ] {
            let error = Schema::new(bad).expect_err(bad).to_string();
            assert!(error.contains("schema"), "{error}");
        }
    }

    #[test]
    fn slots_are_stable_and_in_range() {
        assert_eq!(slot_of("order:c-1"), slot_of("order:c-1"));
        let slots: std::collections::HashSet<i32> =
            (0..1000).map(|i| slot_of(&format!("order:c-{i}"))).collect();
        assert!(slots.iter().all(|s| (0..SLOTS).contains(s)));
        assert!(
            slots.len() > SLOTS as usize / 2,
            "keys spread over the slots: {slots:?}"
        );
    }
}

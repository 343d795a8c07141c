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
    (3, include_str!("../migrations/0003_published_positions.sql")),
    (4, include_str!("../migrations/0004_identity.sql")),
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
    pub(crate) commit: Arc<str>,
    pub(crate) pending: Arc<str>,
    pub(crate) mark_published: Arc<str>,
    pub(crate) mark_failed: Arc<str>,
    pub(crate) mark_abandoned: Arc<str>,
    pub(crate) mark_refused: Arc<str>,
    pub(crate) refused_scopes: Arc<str>,
    pub(crate) adopt_lock: Arc<str>,
    pub(crate) adopt_apart: Arc<str>,
    pub(crate) adopt_back: Arc<str>,
    pub(crate) adopt_positions: Arc<str>,
    pub(crate) identity: Arc<str>,
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
    pub(crate) fence_token: Arc<str>,
    pub(crate) fence_replay: Arc<str>,
    pub(crate) process_load: Arc<str>,
    pub(crate) process_save: Arc<str>,
}

/// The outbox's epoch, as a query: its identity (`outbox_identity`, a
/// random id made with the schema) and what changes when the database's
/// history forks (the write-ahead log's timeline, which a point-in-time
/// recovery or the promotion of a replica moves on; the database's and the
/// schema's OIDs, new after a restore from a dump or a re-created schema),
/// hashed to 16 hex digits. Runs on a primary only (`pg_current_wal_lsn`),
/// where relays run.
const EPOCH: &str = "SELECT left(md5((SELECT id FROM {s}.outbox_identity LIMIT 1) \
     || ':' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) \
     || ':' || (SELECT oid FROM pg_database WHERE datname = current_database())::text \
     || ':' || '{s}'::regnamespace::oid::text), 16) AS epoch";

/// The columns `get` reads from `outbox o`, in
/// [`crate::outbox::read_row`]'s order (`pending` names the same), but for
/// the status, which each query derives (`status`).
const ROW_COLUMNS: &str = "o.id, o.stream, o.seq, o.envelope, o.partition_key, o.lane, o.attempts, o.last_error, \
     (extract(epoch from o.created_at) * 1000000)::int8 AS created_us";

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
            // One round trip: the positions (each scope's row locked until the
            // transaction ends, scopes in the sorted order of `$1`), the rows
            // (in the unit of work's order, so ids grow with positions), and
            // the NOTIFY, delivered only if the transaction commits.
            commit: q(
                "WITH input AS (SELECT * FROM UNNEST($1::text[], $2::int4[], $3::int8[]) AS i(stream, slot, n)), \
                 pos AS (INSERT INTO {s}.outbox_streams AS t (stream, slot, last_seq) \
                 SELECT stream, slot, n FROM input \
                 ON CONFLICT (stream) DO UPDATE SET last_seq = t.last_seq + EXCLUDED.last_seq \
                 RETURNING t.stream, t.last_seq), \
                 ins AS (INSERT INTO {s}.outbox (stream, seq, slot, message_id, category, type_name, partition_key, lane, envelope) \
                 SELECT r.stream, pos.last_seq - i.n + r.k, i.slot, r.message_id, r.category, r.type_name, \
                 r.partition_key, r.lane, r.envelope \
                 FROM UNNEST($4::text[], $5::int8[], $6::text[], $7::text[], $8::text[], $9::text[], $10::int2[], $11::text[]) \
                 WITH ORDINALITY AS r(stream, k, message_id, category, type_name, partition_key, lane, envelope, ord) \
                 JOIN input i ON i.stream = r.stream JOIN pos ON pos.stream = r.stream \
                 ORDER BY r.ord \
                 RETURNING id, stream, seq), \
                 notified AS (SELECT pg_notify($12, '')) \
                 SELECT ins.id, ins.stream, ins.seq FROM ins, notified",
            ),
            // The scopes of this relay's slots with rows above their published
            // position (or above a mark still running, `$3`/`$4`), but those
            // the broker refused lately, oldest first row first; then each
            // one's next rows in position order, up to `$2` in all, cut before
            // their envelopes pass `$5` bytes (but the first row). The row
            // order across scopes is restored by the caller from
            // `first_id`. The sizes are read from the rows' headers
            // (`octet_length` does not load a stored value), and a row above
            // `$6` bytes comes without its envelope, to be abandoned. Each
            // row comes with the outbox's epoch (see `EPOCH`), the count of
            // candidate rows (`fetched`) and its size (`bytes`).
            pending: q(&format!(
                "WITH marking AS (SELECT * FROM UNNEST($3::text[], $4::int8[]) AS m(stream, seq)), \
                 st AS MATERIALIZED (SELECT s.stream, f.id AS first_id, \
                 greatest(s.published_seq, coalesce(m.seq, 0)) AS after \
                 FROM {{s}}.outbox_streams s LEFT JOIN marking m ON m.stream = s.stream \
                 CROSS JOIN LATERAL (SELECT o.id FROM {{s}}.outbox o WHERE o.stream = s.stream \
                 AND o.seq > greatest(s.published_seq, coalesce(m.seq, 0)) AND o.status = 0 ORDER BY o.seq LIMIT 1) f \
                 WHERE s.last_seq > s.published_seq AND (s.refused_until IS NULL OR s.refused_until <= now()) \
                 AND s.slot = ANY(ARRAY(SELECT slot FROM {{s}}.outbox_slots WHERE owner = $1 AND expires_at > now())) \
                 ORDER BY f.id LIMIT $2), \
                 cand AS (SELECT o.*, st.first_id, octet_length(o.envelope)::int8 AS bytes FROM st CROSS JOIN LATERAL \
                 (SELECT * FROM {{s}}.outbox o WHERE o.stream = st.stream AND o.seq > st.after AND o.status = 0 \
                 ORDER BY o.seq LIMIT $2) o LIMIT $2), \
                 sized AS (SELECT c.*, sum(c.bytes) OVER (ORDER BY c.first_id, c.seq ROWS UNBOUNDED PRECEDING) \
                 - c.bytes AS bytes_before, count(*) OVER () AS fetched FROM cand c), \
                 ep AS ({EPOCH}) \
                 SELECT o.id, o.stream, o.seq, CASE WHEN o.bytes > $6 THEN NULL ELSE o.envelope END AS envelope, \
                 o.partition_key, o.lane, o.attempts, o.last_error, \
                 (extract(epoch from o.created_at) * 1000000)::int8 AS created_us, 0::int2 AS status, \
                 o.first_id, o.bytes, o.fetched, ep.epoch FROM sized o CROSS JOIN ep \
                 WHERE o.bytes_before + o.bytes <= $5 OR o.bytes_before = 0"
            )),
            // The epoch alone (what a relay publishes with).
            identity: q(EPOCH),
            // Scopes locked in sorted order, as writers lock them, so a mark
            // and a commit never wait on each other in a cycle. A position
            // also covers the abandoned rows right after it (all the rows
            // after it the statement sees, up to the first one not abandoned:
            // positions are gapless and become visible in order).
            mark_published: q("WITH marked AS (SELECT stream, max(seq) AS seq FROM (\
                 SELECT * FROM UNNEST($1::text[], $2::int8[]) AS m(stream, seq) \
                 UNION ALL SELECT stream, seq FROM {s}.outbox WHERE id = ANY($3::int8[])) AS u GROUP BY stream), \
                 upto AS (SELECT m.stream, coalesce(\
                 (SELECT min(o.seq) - 1 FROM {s}.outbox o WHERE o.stream = m.stream AND o.seq > m.seq AND o.status <> 2), \
                 (SELECT max(o.seq) FROM {s}.outbox o WHERE o.stream = m.stream AND o.seq > m.seq AND o.status = 2), \
                 m.seq) AS seq FROM marked m), \
                 locked AS (SELECT s.stream FROM {s}.outbox_streams s JOIN upto u ON u.stream = s.stream \
                 WHERE s.published_seq < u.seq ORDER BY s.stream FOR NO KEY UPDATE OF s) \
                 UPDATE {s}.outbox_streams s SET published_seq = greatest(s.published_seq, u.seq), \
                 refused = NULL, refused_until = NULL, broker_seq = NULL \
                 FROM upto u, locked l WHERE s.stream = u.stream AND l.stream = u.stream"),
            mark_failed: q(
                "UPDATE {s}.outbox SET attempts = attempts + 1, last_error = $2 WHERE id = $1 AND status = 0 \
                 RETURNING id",
            ),
            // An abandoned row right after the scope's published position (in
            // the database, or of a mark of this relay still running,
            // `$3`/`$4`) moves the position over it, so it does not keep the
            // scope among those with rows to publish.
            mark_abandoned: q(
                "WITH abandoned AS (UPDATE {s}.outbox SET status = 2, last_error = $2 WHERE id = $1 AND status = 0 \
                 RETURNING stream, seq) \
                 UPDATE {s}.outbox_streams s SET published_seq = a.seq FROM abandoned a \
                 WHERE s.stream = a.stream AND s.published_seq < a.seq AND greatest(s.published_seq, \
                 coalesce((SELECT max(m.seq) FROM UNNEST($3::text[], $4::int8[]) AS m(stream, seq) \
                 WHERE m.stream = a.stream), 0)) >= a.seq - 1",
            ),
            // The refused rows (each its scope's next) stay pending with
            // the reason; their scopes are left out of fetches until `$3` ms
            // from now, with the broker's last position (`$4`, or NULL).
            mark_refused: q(
                "WITH r AS (UPDATE {s}.outbox SET attempts = attempts + 1, last_error = $2 \
                 WHERE id = ANY($1::int8[]) AND status = 0 RETURNING stream) \
                 UPDATE {s}.outbox_streams s SET refused = $2, \
                 refused_until = now() + $3 * interval '1 millisecond', broker_seq = $4 \
                 FROM (SELECT DISTINCT stream FROM r) r WHERE s.stream = r.stream",
            ),
            // The scopes refused by the broker with rows still pending.
            refused_scopes: q(
                "SELECT s.stream, s.refused, s.broker_seq, s.published_seq, s.last_seq, \
                 (s.refused_until > now()) AS held FROM {s}.outbox_streams s \
                 WHERE s.refused IS NOT NULL AND s.last_seq > s.published_seq ORDER BY s.stream",
            ),
            // `adopt`: the pending rows of the scopes in conflict with the
            // broker's history are moved past the broker's last position
            // (`$1` scopes, `$2` their published positions, `$3` the
            // shifts), in two steps through negative positions so that no
            // two rows of a scope ever share one.
            adopt_lock: q(
                "SELECT stream, published_seq, broker_seq, last_seq FROM {s}.outbox_streams \
                 WHERE broker_seq IS NOT NULL ORDER BY stream FOR UPDATE",
            ),
            adopt_apart: q("UPDATE {s}.outbox o SET seq = -(o.seq + c.delta) \
                 FROM UNNEST($1::text[], $2::int8[], $3::int8[]) AS c(stream, published, delta) \
                 WHERE o.stream = c.stream AND o.seq > c.published"),
            adopt_back: q("UPDATE {s}.outbox SET seq = -seq WHERE stream = ANY($1::text[]) AND seq < 0"),
            adopt_positions: q(
                "UPDATE {s}.outbox_streams s SET last_seq = s.last_seq + c.delta, \
                 published_seq = s.published_seq + c.delta, refused = NULL, refused_until = NULL, broker_seq = NULL \
                 FROM UNNEST($1::text[], $2::int8[]) AS c(stream, delta) WHERE s.stream = c.stream",
            ),
            get: q(&format!(
                "SELECT {ROW_COLUMNS}, (CASE WHEN o.status = 2 THEN 2 WHEN o.seq <= s.published_seq THEN 1 ELSE 0 END)::int2 \
                 AS status FROM {{s}}.outbox o JOIN {{s}}.outbox_streams s ON s.stream = o.stream WHERE o.id = $1"
            )),
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
            // Oldest first through the index on `created_at`, which bounds
            // the scan to rows past the retention; abandoned rows stay.
            cleanup: q(
                "DELETE FROM {s}.outbox WHERE id IN (SELECT o.id FROM {s}.outbox o \
                 JOIN {s}.outbox_streams s ON s.stream = o.stream \
                 WHERE o.created_at < now() - $1 * interval '1 millisecond' \
                 AND o.seq <= s.published_seq AND o.status <> 2 ORDER BY o.created_at LIMIT $2)",
            ),
            // Pending rows are those above their scope's published position:
            // per scope with such rows (a partial index), the positions above
            // it (gapless, none deleted) less the abandoned rows among them
            // (an index of their own). The oldest pending row is the oldest
            // first pending row of a scope (its `created_at` is its
            // transaction's start, so off by at most a transaction's length).
            status: q("SELECT \
                 (SELECT coalesce(sum(s.last_seq - s.published_seq), 0)::int8 FROM {s}.outbox_streams s \
                 WHERE s.last_seq > s.published_seq) \
                 - (SELECT count(*) FROM {s}.outbox o JOIN {s}.outbox_streams s ON s.stream = o.stream \
                 WHERE o.status = 2 AND o.seq > s.published_seq), \
                 coalesce((SELECT extract(epoch from now() - min(f.created_at)) FROM {s}.outbox_streams s \
                 CROSS JOIN LATERAL (SELECT o.created_at FROM {s}.outbox o WHERE o.stream = s.stream \
                 AND o.seq > s.published_seq AND o.status = 0 ORDER BY o.seq LIMIT 1) f \
                 WHERE s.last_seq > s.published_seq), 0)::float8, \
                 (SELECT count(*) FROM {s}.outbox WHERE status = 2), \
                 (SELECT count(*) FROM {s}.outbox_relays WHERE expires_at > now()), \
                 (SELECT count(*) FROM {s}.outbox_slots WHERE owner IS NOT NULL AND expires_at > now()), \
                 (SELECT count(*) FROM {s}.outbox_streams WHERE refused IS NOT NULL AND last_seq > published_seq), \
                 (SELECT count(*) FROM {s}.outbox_streams WHERE broker_seq IS NOT NULL AND last_seq > published_seq)"),
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
            fence_token: q(
                "UPDATE {s}.applied SET fencing_token = greatest(fencing_token, $3) WHERE consumer = $1 AND scope = $2",
            ),
            fence_replay: q(
                "INSERT INTO {s}.applied_replays (consumer, scope, message_id, fencing_token) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (consumer, scope, message_id) DO NOTHING RETURNING 1",
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

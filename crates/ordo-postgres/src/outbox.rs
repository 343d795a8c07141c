//! [`PgOutbox`]: outbox rows in PostgreSQL, written in the caller's
//! transaction, read back per relay slot in commit order.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, UNIX_EPOCH};

use ordo_core::contract::broker::{POSITION_EPOCH_METADATA, POSITION_METADATA, POSITION_SCOPE_METADATA};
use ordo_core::contract::config::Config;
use ordo_core::contract::error::{CommitError, OutboxError};
use ordo_core::contract::handler::BoxFuture;
use ordo_core::contract::key::Lane;
use ordo_core::contract::message::Envelope;
use ordo_core::contract::outbox::{NewOutboxRow, Outbox, OutboxRow, OutboxStatus, PendingRows};
use ordo_core::runtime::uow::{CommitReceipt, UnitOfWork};
use sqlx::postgres::PgRow;
use sqlx::{AssertSqlSafe, PgConnection, PgPool, Postgres, Row, Transaction};

use crate::error::{Error, Result};
use crate::schema::{DEFAULT_SCHEMA, SLOTS, Schema, slot_of};

/// How long a relay's slot leases live without renewal, by default.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

/// How many `UPDATE`s marking published batches may run while the relay
/// fetches and publishes the next batches: a mark is a round trip that may
/// also wait for a writer holding its scope's row, which the next fetch
/// need not wait for.
const MARKS_IN_FLIGHT: usize = 2;

/// The largest envelope a relay publishes by default: Redis's default
/// `proto-max-bulk-len` (512 MB), beyond which no Redis takes it. A larger
/// row is abandoned, never loaded.
pub const DEFAULT_MAX_ROW_BYTES: usize = 512 << 20;

/// How long relays leave a scope out of their fetches after the broker
/// refused its next row (then they try it again).
const REFUSED_HOLD: Duration = Duration::from_secs(10);

/// Fetched rows whose outcome is not known yet, beyond which they are
/// forgotten (rows a failed run never resolved): a mark of an id not
/// remembered finds its position by the id instead.
const FETCHED_REMEMBERED: usize = 1 << 16;

/// The PostgreSQL outbox.
///
/// - [`PgOutbox::commit_in`] (or [`UnitOfWorkExt::commit_in`]) writes a unit
///   of work's rows in the caller's transaction: they exist if and only if
///   that transaction commits.
/// - As an [`Outbox`] it also serves `UnitOfWork::commit()` (rows appended
///   in a transaction of their own) and feeds an `OutboxProcessor`: its
///   [`Outbox::pending`] returns only rows of the relay slots this outbox
///   leases, in commit order per scope, each carrying its position, so any
///   number of processes can publish from one database (see
///   [`PgRelay`](crate::PgRelay) and docs/POSTGRES.md).
///
/// Each `PgOutbox` value is one relay identity; clones share it.
#[derive(Clone)]
pub struct PgOutbox {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    schema: Schema,
    backfill_suffix: String,
    relay_id: String,
    lease_ttl: Duration,
    max_row_bytes: usize,
    leases: Mutex<Option<Instant>>,
    /// The position (scope and seq) of each fetched row not yet marked.
    fetched: Mutex<HashMap<u64, (Arc<str>, i64)>>,
    /// Marks of published batches still running, oldest first.
    marking: Mutex<VecDeque<Marking>>,
}

/// An `UPDATE` moving published positions, running on a task of its own.
struct Marking {
    /// Per scope, the position published up to.
    positions: Positions,
    task: tokio::task::JoinHandle<Result<()>>,
}

/// Positions per scope, as parallel arrays (what the statements bind).
#[derive(Debug, Default)]
struct Positions {
    scopes: Vec<String>,
    seqs: Vec<i64>,
}

impl Positions {
    /// The highest position per scope of `positions`.
    fn highest<'a>(positions: impl IntoIterator<Item = (&'a str, i64)>) -> Self {
        let mut highest: BTreeMap<&str, i64> = BTreeMap::new();
        for (scope, seq) in positions {
            let entry = highest.entry(scope).or_insert(seq);
            *entry = (*entry).max(seq);
        }
        Self {
            scopes: highest.keys().map(|&s| s.to_owned()).collect(),
            seqs: highest.into_values().collect(),
        }
    }
}

/// Configures a [`PgOutbox`].
#[derive(Debug, Clone)]
pub struct PgOutboxBuilder {
    pool: PgPool,
    schema: String,
    backfill_suffix: String,
    lease_ttl: Duration,
    max_row_bytes: usize,
    relay_id: Option<String>,
}

impl PgOutbox {
    /// A builder for an outbox in `pool`'s database, in schema `ordo`.
    pub fn builder(pool: PgPool) -> PgOutboxBuilder {
        PgOutboxBuilder {
            pool,
            schema: DEFAULT_SCHEMA.to_owned(),
            backfill_suffix: Config::default().key_rules().backfill_suffix().to_owned(),
            lease_ttl: DEFAULT_LEASE_TTL,
            max_row_bytes: DEFAULT_MAX_ROW_BYTES,
            relay_id: None,
        }
    }

    /// Creates or upgrades the schema and its tables (embedded migrations;
    /// safe to call from several processes at once).
    pub async fn migrate(&self) -> Result<()> {
        self.inner.schema.migrate(&self.inner.pool).await
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The schema the tables live in.
    pub fn schema(&self) -> &str {
        self.inner.schema.name()
    }

    /// The NOTIFY channel a commit wakes relays on (`{schema}_outbox`).
    pub fn channel(&self) -> String {
        self.inner.schema.channel()
    }

    /// This relay identity's id.
    pub fn relay_id(&self) -> &str {
        &self.inner.relay_id
    }

    /// The slot lease TTL.
    pub fn lease_ttl(&self) -> Duration {
        self.inner.lease_ttl
    }

    pub(crate) fn sql(&self) -> &crate::schema::Sql {
        &self.inner.schema.sql
    }

    /// Validates every key of `uow` (exactly as `commit()` does: a bad key
    /// fails before anything is written), inserts its rows in `tx`, and
    /// queues a NOTIFY that wakes the relays when `tx` commits. Rolled back,
    /// nothing of it is ever published.
    pub async fn commit_in(
        &self,
        uow: UnitOfWork,
        tx: &mut Transaction<'_, Postgres>,
    ) -> Result<CommitReceipt, CommitError> {
        let rows = uow.validated_rows()?;
        let suffix = uow.domain().config().key_rules().backfill_suffix().to_owned();
        insert(&self.inner.schema, &mut *tx, rows, &suffix)
            .await
            .map_err(|e| CommitError::Outbox(storage(e)))
    }

    /// Leases this relay's fair share of the slots, at most once per third
    /// of the lease TTL (or when `force`).
    pub(crate) async fn maintain_leases(&self, force: bool) -> Result<()> {
        let due = {
            let last = self.inner.leases.lock().unwrap_or_else(PoisonError::into_inner);
            force || last.is_none_or(|at| at.elapsed() >= self.inner.lease_ttl / 3)
        };
        if !due {
            return Ok(());
        }
        let sql = self.sql();
        let me = &self.inner.relay_id;
        let ttl_ms = i64::try_from(self.inner.lease_ttl.as_millis()).unwrap_or(i64::MAX);
        let pool = &self.inner.pool;
        sqlx::query(AssertSqlSafe(sql.register_relay.clone()))
            .bind(me)
            .bind(ttl_ms)
            .execute(pool)
            .await?;
        let live: i64 = sqlx::query_scalar(AssertSqlSafe(sql.live_relays.clone()))
            .fetch_one(pool)
            .await?;
        let mut owned: Vec<i32> = sqlx::query_scalar(AssertSqlSafe(sql.renew_slots.clone()))
            .bind(me)
            .bind(ttl_ms)
            .fetch_all(pool)
            .await?;
        let live = u64::try_from(live).unwrap_or(1).max(1);
        let share = usize::try_from(u64::from(SLOTS.unsigned_abs()).div_ceil(live)).unwrap_or(1);
        if owned.len() > share {
            owned.sort_unstable();
            let extra = owned.split_off(share);
            sqlx::query(AssertSqlSafe(sql.release_slots.clone()))
                .bind(me)
                .bind(&extra)
                .execute(pool)
                .await?;
            tracing::debug!(relay = %me, released = extra.len(), share, "released outbox slots over the fair share");
        } else if owned.len() < share {
            let want = i64::try_from(share - owned.len()).unwrap_or(0);
            let acquired: Vec<i32> = sqlx::query_scalar(AssertSqlSafe(sql.acquire_slots.clone()))
                .bind(me)
                .bind(ttl_ms)
                .bind(want)
                .fetch_all(pool)
                .await?;
            if !acquired.is_empty() {
                tracing::debug!(relay = %me, acquired = acquired.len(), share, "leased outbox slots");
            }
        }
        *self.inner.leases.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        Ok(())
    }

    /// Leases this relay's fair share of the slots now (registering it as a
    /// live relay first), releasing any over the share. Relays do this by
    /// themselves every third of the lease TTL; calling it on several
    /// relays in turn spreads the slots at once (what a benchmark wants).
    pub async fn lease_slots(&self) -> Result<()> {
        self.maintain_leases(true).await
    }

    /// Gives up this relay's slots at once (on shutdown), so others take
    /// them without waiting for the leases to expire.
    pub async fn release_leases(&self) -> Result<()> {
        // The next owner would publish still unmarked rows again (dropped
        // by position, but wasted).
        if let Err(error) = self.flush_marks().await {
            tracing::warn!(error = %ordo_core::contract::error::error_chain(&error), "marking published outbox rows failed");
        }
        sqlx::query(AssertSqlSafe(self.sql().forget_relay.clone()))
            .bind(&self.inner.relay_id)
            .execute(&self.inner.pool)
            .await?;
        *self.inner.leases.lock().unwrap_or_else(PoisonError::into_inner) = None;
        Ok(())
    }

    /// Up to `limit` pending rows of this relay's slots holding at most
    /// `max_bytes` of envelopes (at least one row). A row that cannot be
    /// read (its envelope not JSON, its lane unknown) or is larger than
    /// [`PgOutboxBuilder::max_row_bytes`] is abandoned with the reason,
    /// logged at error level (`outbox.row_unreadable`), and left out.
    async fn pending_rows(&self, limit: usize, max_bytes: usize) -> Result<PendingRows> {
        self.maintain_leases(false).await?;
        let marking = self.reap_marks().await;
        let fetched = sqlx::query(AssertSqlSafe(self.sql().pending.clone()))
            .bind(&self.inner.relay_id)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(&marking.scopes)
            .bind(&marking.seqs)
            .bind(i64::try_from(max_bytes).unwrap_or(i64::MAX))
            .bind(i64::try_from(self.inner.max_row_bytes).unwrap_or(i64::MAX))
            .fetch_all(&self.inner.pool)
            .await?;
        let candidates = match fetched.first() {
            Some(row) => usize::try_from(row.try_get::<i64, _>("fetched")?).unwrap_or(0),
            None => 0,
        };
        let more = candidates >= limit || fetched.len() < candidates;
        let mut rows = Vec::with_capacity(fetched.len());
        let mut unreadable = Vec::new();
        for row in &fetched {
            let first_id: i64 = row.try_get("first_id")?;
            let seq: i64 = row.try_get("seq")?;
            let bytes: i64 = row.try_get("bytes")?;
            if usize::try_from(bytes).unwrap_or(usize::MAX) > self.inner.max_row_bytes {
                let id: i64 = row.try_get("id")?;
                unreadable.push((
                    id,
                    format!(
                        "its envelope of {bytes} bytes is larger than this relay publishes ({} bytes, \
                         `max_row_bytes`)",
                        self.inner.max_row_bytes
                    ),
                ));
                continue;
            }
            match read_row(row) {
                Ok(read) => rows.push((first_id, seq, read)),
                Err(Error::CorruptRow { id, reason }) => unreadable.push((id, reason)),
                Err(error) => return Err(error),
            }
        }
        for (id, reason) in unreadable {
            let id = u64::try_from(id).unwrap_or(0);
            tracing::error!(event = ordo_core::contract::log_events::OUTBOX_ROW_UNREADABLE, row = id, error = %reason,
                "abandoning an outbox row that cannot be published; the rows behind it go on");
            self.mark_abandoned_row(id, &format!("unreadable: {reason}"))
                .await?;
            metrics::counter!("ordo_outbox_abandoned_total").increment(1);
        }
        // Scopes oldest first, each one's rows in position order.
        rows.sort_unstable_by_key(|&(first_id, seq, _)| (first_id, seq));
        let mut remembered = self.inner.fetched.lock().unwrap_or_else(PoisonError::into_inner);
        if remembered.len() > FETCHED_REMEMBERED {
            remembered.clear();
        }
        let rows: Vec<OutboxRow> = rows.into_iter().map(|(_, _, row)| row).collect();
        for row in &rows {
            let (scope, seq) = position_of(row)?;
            remembered.insert(row.id, (scope.into(), seq));
        }
        Ok(PendingRows::new(rows, more))
    }

    /// Collects the marks that have finished; returns the positions of the
    /// marks still running, past which a fetch starts: those rows are
    /// published already. A mark that failed leaves its rows pending: they
    /// are fetched again, and their re-publish is dropped by position (see
    /// docs/POSTGRES.md).
    async fn reap_marks(&self) -> Positions {
        let finished: Vec<Marking> = {
            let mut marking = self.inner.marking.lock().unwrap_or_else(PoisonError::into_inner);
            let mut finished = Vec::new();
            while marking.front().is_some_and(|m| m.task.is_finished()) {
                finished.extend(marking.pop_front());
            }
            finished
        };
        for mark in finished {
            if let Err(error) = join_mark(mark).await {
                tracing::warn!(error = %ordo_core::contract::error::error_chain(&error),
                    "marking published outbox rows failed; they will be published again (and dropped by position)");
            }
        }
        self.marks_running()
    }

    /// The highest position per scope of the marks still running.
    fn marks_running(&self) -> Positions {
        let marking = self.inner.marking.lock().unwrap_or_else(PoisonError::into_inner);
        Positions::highest(marking.iter().flat_map(|m| {
            m.positions
                .scopes
                .iter()
                .map(String::as_str)
                .zip(m.positions.seqs.iter().copied())
        }))
    }

    /// Waits for every mark of a published batch still running; returns
    /// the first failure.
    pub(crate) async fn flush_marks(&self) -> Result<()> {
        let all: Vec<Marking> = self
            .inner
            .marking
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
            .collect();
        let mut outcome = Ok(());
        for mark in all {
            let result = join_mark(mark).await;
            if outcome.is_ok() {
                outcome = result;
            }
        }
        outcome
    }

    async fn append_rows(&self, rows: Vec<NewOutboxRow>) -> Result<Vec<u64>> {
        let mut tx = self.inner.pool.begin().await?;
        let receipt = insert(&self.inner.schema, &mut tx, rows, &self.inner.backfill_suffix).await?;
        tx.commit().await?;
        Ok(receipt.row_ids)
    }

    /// Starts moving the published positions of the scopes of `ids` and
    /// returns; waits only for the oldest mark when more than
    /// [`MARKS_IN_FLIGHT`] run. The rows were published: if the mark fails,
    /// they are published again and dropped by position, so nothing is lost
    /// or duplicated, only work wasted.
    ///
    /// One position per scope covers the rows: the ids a processor marks
    /// are, per scope, the first rows of what it fetched (it publishes in
    /// order and stops at the first failure), and the rows before them are
    /// published or abandoned already.
    async fn mark_published_rows(&self, ids: &[u64]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let (known, unknown): (Vec<(Arc<str>, i64)>, Vec<i64>) = {
            let mut fetched = self.inner.fetched.lock().unwrap_or_else(PoisonError::into_inner);
            let mut known = Vec::with_capacity(ids.len());
            let mut unknown = Vec::new();
            for id in ids {
                match fetched.remove(id) {
                    Some(position) => known.push(position),
                    None => unknown.push(to_i64(*id)),
                }
            }
            (known, unknown)
        };
        let positions = Positions::highest(known.iter().map(|(scope, seq)| (&**scope, *seq)));
        let (pool, sql) = (self.inner.pool.clone(), self.sql().mark_published.clone());
        let (scopes, seqs) = (positions.scopes.clone(), positions.seqs.clone());
        let task = tokio::spawn(async move {
            sqlx::query(AssertSqlSafe(sql))
                .bind(&scopes)
                .bind(&seqs)
                .bind(&unknown)
                .execute(&pool)
                .await?;
            Ok(())
        });
        let oldest = {
            let mut marking = self.inner.marking.lock().unwrap_or_else(PoisonError::into_inner);
            marking.push_back(Marking { positions, task });
            if marking.len() > MARKS_IN_FLIGHT {
                marking.pop_front()
            } else {
                None
            }
        };
        match oldest {
            Some(mark) => join_mark(mark).await,
            None => Ok(()),
        }
    }

    fn forget_fetched(&self, id: u64) {
        self.inner
            .fetched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
    }

    async fn mark_failed_row(&self, id: u64, error: &str) -> Result<()> {
        self.forget_fetched(id);
        sqlx::query(AssertSqlSafe(self.sql().mark_failed.clone()))
            .bind(to_i64(id))
            .bind(error)
            .execute(&self.inner.pool)
            .await?;
        Ok(())
    }

    async fn mark_refused_rows(&self, ids: &[u64], reason: &str, broker_position: Option<u64>) -> Result<()> {
        for &id in ids {
            self.forget_fetched(id);
        }
        let ids: Vec<i64> = ids.iter().map(|&id| to_i64(id)).collect();
        let hold = i64::try_from(REFUSED_HOLD.as_millis()).unwrap_or(i64::MAX);
        sqlx::query(AssertSqlSafe(self.sql().mark_refused.clone()))
            .bind(&ids)
            .bind(reason)
            .bind(hold)
            .bind(broker_position.map(|p| i64::try_from(p).unwrap_or(i64::MAX)))
            .execute(&self.inner.pool)
            .await?;
        Ok(())
    }

    async fn mark_abandoned_row(&self, id: u64, reason: &str) -> Result<()> {
        self.forget_fetched(id);
        let running = self.marks_running();
        sqlx::query(AssertSqlSafe(self.sql().mark_abandoned.clone()))
            .bind(to_i64(id))
            .bind(reason)
            .bind(&running.scopes)
            .bind(&running.seqs)
            .execute(&self.inner.pool)
            .await?;
        Ok(())
    }

    async fn get_row(&self, id: u64) -> Result<Option<OutboxRow>> {
        let row = sqlx::query(AssertSqlSafe(self.sql().get.clone()))
            .bind(to_i64(id))
            .fetch_optional(&self.inner.pool)
            .await?;
        row.as_ref().map(read_row).transpose()
    }
}

impl fmt::Debug for PgOutbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgOutbox")
            .field("schema", &self.inner.schema.name())
            .field("relay_id", &self.inner.relay_id)
            .field("lease_ttl", &self.inner.lease_ttl)
            .finish_non_exhaustive()
    }
}

impl PgOutboxBuilder {
    /// The schema holding the tables (default `ordo`): a plain lower-case
    /// identifier.
    #[must_use]
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The domain configuration (its backfill suffix names backfill scopes
    /// of rows appended through `commit()`).
    #[must_use]
    pub fn config(mut self, config: &Config) -> Self {
        config
            .key_rules()
            .backfill_suffix()
            .clone_into(&mut self.backfill_suffix);
        self
    }

    /// How long this relay's slot leases live without renewal (default
    /// 10 s): how long a crashed or stalled relay's keys wait for another.
    #[must_use]
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// The largest envelope this relay publishes (default 512 MiB, Redis's
    /// default `proto-max-bulk-len`; at least 1): a larger row could never
    /// be published, so it is abandoned with the reason (and never loaded
    /// into memory).
    #[must_use]
    pub fn max_row_bytes(mut self, bytes: usize) -> Self {
        self.max_row_bytes = bytes.max(1);
        self
    }

    /// This relay identity's id (default: a fresh UUID). Must be unique among
    /// live relays.
    #[must_use]
    pub fn relay_id(mut self, id: impl Into<String>) -> Self {
        self.relay_id = Some(id.into());
        self
    }

    /// Validates the settings.
    pub fn build(self) -> Result<PgOutbox> {
        let schema = Schema::new(&self.schema)?;
        if self.lease_ttl < Duration::from_millis(300) {
            return Err(Error::Config {
                key: "lease_ttl",
                reason: format!("must be at least 300 ms, got {:?}", self.lease_ttl),
            });
        }
        let relay_id = match self.relay_id {
            Some(id) if id.is_empty() => {
                return Err(Error::Config {
                    key: "relay_id",
                    reason: "must not be empty".to_owned(),
                });
            }
            Some(id) => id,
            None => uuid::Uuid::new_v4().simple().to_string(),
        };
        Ok(PgOutbox {
            inner: Arc::new(Inner {
                pool: self.pool,
                schema,
                backfill_suffix: self.backfill_suffix,
                relay_id,
                lease_ttl: self.lease_ttl,
                max_row_bytes: self.max_row_bytes,
                leases: Mutex::new(None),
                fetched: Mutex::new(HashMap::new()),
                marking: Mutex::new(VecDeque::new()),
            }),
        })
    }
}

/// `commit_in` on a unit of work.
pub trait UnitOfWorkExt {
    /// Commits the unit of work into `tx`, in the outbox of schema `ordo`:
    /// see [`PgOutbox::commit_in`]. Use [`UnitOfWorkExt::commit_in_outbox`]
    /// for another schema.
    fn commit_in<'a>(
        self,
        tx: &'a mut Transaction<'_, Postgres>,
    ) -> impl Future<Output = Result<CommitReceipt, CommitError>> + Send + 'a;

    /// Commits the unit of work into `tx`, in `outbox`'s schema.
    fn commit_in_outbox<'a>(
        self,
        outbox: &'a PgOutbox,
        tx: &'a mut Transaction<'_, Postgres>,
    ) -> impl Future<Output = Result<CommitReceipt, CommitError>> + Send + 'a;
}

impl UnitOfWorkExt for UnitOfWork {
    async fn commit_in(self, tx: &mut Transaction<'_, Postgres>) -> Result<CommitReceipt, CommitError> {
        let rows = self.validated_rows()?;
        let suffix = self.domain().config().key_rules().backfill_suffix().to_owned();
        let schema = Schema::new(DEFAULT_SCHEMA).map_err(|e| CommitError::Outbox(storage(e)))?;
        insert(&schema, &mut *tx, rows, &suffix)
            .await
            .map_err(|e| CommitError::Outbox(storage(e)))
    }

    fn commit_in_outbox<'a>(
        self,
        outbox: &'a PgOutbox,
        tx: &'a mut Transaction<'_, Postgres>,
    ) -> impl Future<Output = Result<CommitReceipt, CommitError>> + Send + 'a {
        outbox.commit_in(self, tx)
    }
}

/// The outcome of a mark.
async fn join_mark(mark: Marking) -> Result<()> {
    mark.task
        .await
        .map_err(|error| Error::MarkTask(error.to_string()))?
}

fn storage(error: Error) -> OutboxError {
    OutboxError::Storage(Box::new(error))
}

fn to_i64(id: u64) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}

/// The position scope of a row: this outbox's id of its (category, key,
/// lane), or its category when it has no key. The text is the outbox's own
/// (`{category}:{key}`, `{category}:{key}:{backfill_suffix}`: the 0.x stream
/// names, kept so the positions already handed out carry on); brokers key
/// their positions on the publication's (category, key, lane), never on it.
fn scope_of(envelope: &Envelope, lane: Lane, backfill_suffix: &str) -> String {
    match (&envelope.partition_key, lane) {
        (Some(key), Lane::Primary) => format!("{}:{key}", envelope.category),
        (Some(key), Lane::Backfill) => format!("{}:{key}:{backfill_suffix}", envelope.category),
        (None, _) => envelope.category.clone(),
    }
}

/// Inserts `rows` in the transaction on `conn`, in one statement: positions
/// first (scopes in sorted order, so two transactions never wait on each
/// other in a cycle), then the rows, then the NOTIFY.
async fn insert(
    schema: &Schema,
    conn: &mut PgConnection,
    rows: Vec<NewOutboxRow>,
    backfill_suffix: &str,
) -> Result<CommitReceipt> {
    if rows.is_empty() {
        return Ok(CommitReceipt::default());
    }
    let scopes: Vec<String> = rows
        .iter()
        .map(|row| scope_of(&row.envelope, row.lane, backfill_suffix))
        .collect();
    let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
    // Each row's place among its scope's rows in this commit (1, 2, ...).
    let mut places = Vec::with_capacity(rows.len());
    for scope in &scopes {
        let count = counts.entry(scope.as_str()).or_default();
        *count += 1;
        places.push(*count);
    }
    let names: Vec<&str> = counts.keys().copied().collect();
    let slots: Vec<i32> = names.iter().map(|s| slot_of(s)).collect();
    let added: Vec<i64> = counts.values().copied().collect();
    let message_ids: Vec<&str> = rows.iter().map(|r| r.envelope.id.as_str()).collect();
    let categories: Vec<&str> = rows.iter().map(|r| r.envelope.category.as_str()).collect();
    let types: Vec<&str> = rows.iter().map(|r| r.envelope.type_name.as_str()).collect();
    let keys: Vec<Option<&str>> = rows.iter().map(|r| r.envelope.partition_key.as_deref()).collect();
    let lanes: Vec<i16> = rows.iter().map(|r| lane_code(r.lane)).collect();
    let envelopes = rows
        .iter()
        .map(|r| serde_json::to_string(&r.envelope))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Config {
            key: "envelope",
            reason: format!("cannot encode an envelope: {e}"),
        })?;
    let inserted: Vec<(i64, String, i64)> = sqlx::query_as(AssertSqlSafe(schema.sql.commit.clone()))
        .bind(&names)
        .bind(&slots)
        .bind(&added)
        .bind(&scopes)
        .bind(&places)
        .bind(&message_ids)
        .bind(&categories)
        .bind(&types)
        .bind(&keys)
        .bind(&lanes)
        .bind(&envelopes)
        .bind(schema.channel())
        .fetch_all(&mut *conn)
        .await?;
    if inserted.len() != rows.len() {
        return Err(Error::Config {
            key: "schema",
            reason: format!("{} rows were inserted of {}", inserted.len(), rows.len()),
        });
    }
    // A scope's `k`-th row of this commit has the scope's `k`-th position.
    let mut by_scope: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for (id, scope, seq) in inserted {
        by_scope.entry(scope).or_default().push((seq, id));
    }
    for ids in by_scope.values_mut() {
        ids.sort_unstable();
    }
    let row_ids = scopes
        .iter()
        .zip(&places)
        .map(|(scope, &place)| {
            by_scope
                .get(scope)
                .and_then(|ids| ids.get(usize::try_from(place - 1).ok()?))
                .map(|&(_, id)| u64::try_from(id).unwrap_or(0))
                .ok_or_else(|| Error::Config {
                    key: "schema",
                    reason: format!(
                        "no row was returned for position {place} of scope {scope:?} in this commit"
                    ),
                })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(CommitReceipt {
        row_ids,
        message_ids: rows.into_iter().map(|r| r.envelope.id).collect(),
    })
}

fn lane_code(lane: Lane) -> i16 {
    match lane {
        Lane::Primary => 0,
        Lane::Backfill => 1,
    }
}

/// The position scope and position a row read by [`read_row`] carries.
fn position_of(row: &OutboxRow) -> Result<(&str, i64)> {
    let corrupt = |reason: &str| Error::CorruptRow {
        id: to_i64(row.id),
        reason: reason.to_owned(),
    };
    let scope = row
        .envelope
        .metadata
        .get(POSITION_SCOPE_METADATA)
        .ok_or_else(|| corrupt("no position scope"))?;
    let seq = row
        .envelope
        .metadata
        .get(POSITION_METADATA)
        .and_then(|seq| seq.parse().ok())
        .ok_or_else(|| corrupt("no position"))?;
    Ok((scope, seq))
}

/// Reads a row selected with the `ROW_COLUMNS` of the schema module and a
/// derived `status`; the envelope gets its position scope and position as
/// metadata.
pub(crate) fn read_row(row: &PgRow) -> Result<OutboxRow> {
    let id: i64 = row.try_get("id")?;
    let corrupt = |reason: String| Error::CorruptRow { id, reason };
    let scope: String = row.try_get("stream")?;
    let seq: i64 = row.try_get("seq")?;
    let text: Option<String> = row.try_get("envelope")?;
    let text = text.ok_or_else(|| corrupt("it has no envelope".to_owned()))?;
    let mut envelope: Envelope =
        serde_json::from_str(&text).map_err(|e| corrupt(format!("envelope is not valid JSON: {e}")))?;
    envelope
        .metadata
        .insert(POSITION_SCOPE_METADATA.to_owned(), scope);
    envelope
        .metadata
        .insert(POSITION_METADATA.to_owned(), seq.to_string());
    // The fetch says which history the position belongs to.
    if let Ok(Some(epoch)) = row.try_get::<Option<String>, _>("epoch") {
        envelope
            .metadata
            .insert(POSITION_EPOCH_METADATA.to_owned(), epoch);
    }
    let lane = match row.try_get::<i16, _>("lane")? {
        0 => Lane::Primary,
        1 => Lane::Backfill,
        other => return Err(corrupt(format!("unknown lane {other}"))),
    };
    let status = match row.try_get::<i16, _>("status")? {
        0 => OutboxStatus::Pending,
        1 => OutboxStatus::Published,
        2 => OutboxStatus::Abandoned,
        other => return Err(corrupt(format!("unknown status {other}"))),
    };
    let created_us: i64 = row.try_get("created_us")?;
    let attempts: i32 = row.try_get("attempts")?;
    Ok(OutboxRow {
        id: u64::try_from(id).map_err(|_| corrupt("negative id".to_owned()))?,
        partition_key: row.try_get("partition_key")?,
        envelope,
        lane,
        status,
        attempts: u32::try_from(attempts).unwrap_or(0),
        last_error: row.try_get("last_error")?,
        created_at: UNIX_EPOCH + Duration::from_micros(u64::try_from(created_us).unwrap_or(0)),
        // Not stored: this outbox has no producer id, its rows are
        // deduplicated by position whatever their message id.
        derived_id: false,
    })
}

impl Outbox for PgOutbox {
    fn append(&self, rows: Vec<NewOutboxRow>) -> BoxFuture<'_, Result<Vec<u64>, OutboxError>> {
        Box::pin(async move { self.append_rows(rows).await.map_err(storage) })
    }

    fn pending(&self, limit: usize) -> BoxFuture<'_, Result<Vec<OutboxRow>, OutboxError>> {
        Box::pin(async move {
            let fetched = self.pending_rows(limit, usize::MAX).await.map_err(storage)?;
            Ok(fetched.rows)
        })
    }

    fn pending_within(
        &self,
        limit: usize,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<PendingRows, OutboxError>> {
        Box::pin(async move { self.pending_rows(limit, max_bytes).await.map_err(storage) })
    }

    fn mark_refused<'a>(
        &'a self,
        ids: &'a [u64],
        reason: &'a str,
        broker_position: Option<u64>,
    ) -> BoxFuture<'a, Result<(), OutboxError>> {
        Box::pin(async move {
            self.mark_refused_rows(ids, reason, broker_position)
                .await
                .map_err(storage)
        })
    }

    fn mark_published<'a>(&'a self, ids: &'a [u64]) -> BoxFuture<'a, Result<(), OutboxError>> {
        Box::pin(async move { self.mark_published_rows(ids).await.map_err(storage) })
    }

    fn mark_failed<'a>(&'a self, id: u64, error: &'a str) -> BoxFuture<'a, Result<(), OutboxError>> {
        Box::pin(async move { self.mark_failed_row(id, error).await.map_err(storage) })
    }

    fn mark_abandoned<'a>(&'a self, id: u64, reason: &'a str) -> BoxFuture<'a, Result<(), OutboxError>> {
        Box::pin(async move { self.mark_abandoned_row(id, reason).await.map_err(storage) })
    }

    fn get(&self, id: u64) -> BoxFuture<'_, Result<Option<OutboxRow>, OutboxError>> {
        Box::pin(async move { self.get_row(id).await.map_err(storage) })
    }
}

//! The transactional outbox: rows written by a unit of work's commit, and the
//! processor that publishes them to the broker in commit order.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::broker::{Broker, Publication, RefusedExtent};
use crate::config::Config;
use crate::error::{OutboxError, error_chain};
use crate::handler::BoxFuture;
use crate::key::{InvalidKey, KeyRules, Lane};
use crate::message::Envelope;

/// The state of an outbox row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutboxStatus {
    /// Not published yet (possibly after failed attempts).
    Pending,
    /// Handed to the broker.
    Published,
    /// Given up for good (an invalid key); never retried.
    Abandoned,
}

/// A row to append: the message and its lane. The partition key is the
/// envelope's (`None` for a category nobody partitions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOutboxRow {
    /// The message, with its validated `partition_key`.
    pub envelope: Envelope,
    /// The lane the row is meant for.
    pub lane: Lane,
}

impl NewOutboxRow {
    /// A row for `envelope` on `lane`.
    pub fn new(envelope: Envelope, lane: Lane) -> Self {
        Self { envelope, lane }
    }
}

/// A stored outbox row.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRow {
    /// The commit sequence number: rows are published in this order.
    pub id: u64,
    /// The message.
    pub envelope: Envelope,
    /// The validated partition key (also on the envelope).
    pub partition_key: Option<String>,
    /// The lane the row is meant for.
    pub lane: Lane,
    /// Pending, published or abandoned.
    pub status: OutboxStatus,
    /// Failed publish attempts so far.
    pub attempts: u32,
    /// The last publish error, or why the row was abandoned.
    pub last_error: Option<String>,
    /// When the row was appended.
    pub created_at: SystemTime,
}

/// What one fetch of pending rows returned.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct PendingRows {
    /// The rows, in commit order.
    pub rows: Vec<OutboxRow>,
    /// Whether the fetch stopped at a bound (rows or bytes), so more rows
    /// may be pending right now.
    pub more: bool,
}

impl PendingRows {
    /// `rows`, `more` of them possibly pending.
    pub fn new(rows: Vec<OutboxRow>, more: bool) -> Self {
        Self { rows, more }
    }
}

/// Storage for outbox rows.
///
/// Implementations must assign increasing ids in append order (the commit
/// order) and make [`Outbox::append`] all-or-nothing.
pub trait Outbox: Send + Sync + fmt::Debug + 'static {
    /// Appends `rows` atomically, returning their ids in order.
    fn append(&self, rows: Vec<NewOutboxRow>) -> BoxFuture<'_, Result<Vec<u64>, OutboxError>>;

    /// Up to `limit` pending rows, in commit order.
    fn pending(&self, limit: usize) -> BoxFuture<'_, Result<Vec<OutboxRow>, OutboxError>>;

    /// Marks rows published.
    fn mark_published<'a>(&'a self, ids: &'a [u64]) -> BoxFuture<'a, Result<(), OutboxError>>;

    /// Records a failed publish attempt: `attempts + 1`, `last_error`; the row
    /// stays pending.
    fn mark_failed<'a>(&'a self, id: u64, error: &'a str) -> BoxFuture<'a, Result<(), OutboxError>>;

    /// Gives a row up for good, recording why.
    fn mark_abandoned<'a>(&'a self, id: u64, reason: &'a str) -> BoxFuture<'a, Result<(), OutboxError>>;

    /// One row, for inspection.
    fn get(&self, id: u64) -> BoxFuture<'_, Result<Option<OutboxRow>, OutboxError>>;

    /// Up to `limit` pending rows, in commit order, holding at most
    /// `max_bytes` of messages between them (but at least one row, however
    /// big), so a fetch never holds more than that in memory. The default
    /// bounds by rows only: [`Outbox::pending`], `more` when `limit` rows
    /// came back.
    fn pending_within(
        &self,
        limit: usize,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<PendingRows, OutboxError>> {
        let _ = max_bytes;
        Box::pin(async move {
            let rows = self.pending(limit).await?;
            let more = rows.len() >= limit;
            Ok(PendingRows { rows, more })
        })
    }

    /// The broker refused rows `ids` (each the first of its position scope
    /// in the run) for a reason of that scope's or category's own
    /// ([`Refusal`](crate::broker::Refusal)): a category the broker
    /// partitions otherwise, a position the broker holds from another
    /// history (`broker_position`: its last position of the scope). The
    /// rows stay pending, with `reason`; an outbox that can holds their
    /// scopes back for a while, so they do not come first in every fetch.
    /// The default records a failed attempt on each.
    fn mark_refused<'a>(
        &'a self,
        ids: &'a [u64],
        reason: &'a str,
        broker_position: Option<u64>,
    ) -> BoxFuture<'a, Result<(), OutboxError>> {
        let _ = broker_position;
        Box::pin(async move {
            for &id in ids {
                self.mark_failed(id, reason).await?;
            }
            Ok(())
        })
    }
}

impl<O: Outbox + ?Sized> Outbox for Arc<O> {
    fn append(&self, rows: Vec<NewOutboxRow>) -> BoxFuture<'_, Result<Vec<u64>, OutboxError>> {
        (**self).append(rows)
    }

    fn pending(&self, limit: usize) -> BoxFuture<'_, Result<Vec<OutboxRow>, OutboxError>> {
        (**self).pending(limit)
    }

    fn mark_published<'a>(&'a self, ids: &'a [u64]) -> BoxFuture<'a, Result<(), OutboxError>> {
        (**self).mark_published(ids)
    }

    fn mark_failed<'a>(&'a self, id: u64, error: &'a str) -> BoxFuture<'a, Result<(), OutboxError>> {
        (**self).mark_failed(id, error)
    }

    fn mark_abandoned<'a>(&'a self, id: u64, reason: &'a str) -> BoxFuture<'a, Result<(), OutboxError>> {
        (**self).mark_abandoned(id, reason)
    }

    fn get(&self, id: u64) -> BoxFuture<'_, Result<Option<OutboxRow>, OutboxError>> {
        (**self).get(id)
    }

    fn pending_within(
        &self,
        limit: usize,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<PendingRows, OutboxError>> {
        (**self).pending_within(limit, max_bytes)
    }

    fn mark_refused<'a>(
        &'a self,
        ids: &'a [u64],
        reason: &'a str,
        broker_position: Option<u64>,
    ) -> BoxFuture<'a, Result<(), OutboxError>> {
        (**self).mark_refused(ids, reason, broker_position)
    }
}

/// How many published rows [`InMemoryOutbox`] keeps by default.
pub const DEFAULT_RETENTION: usize = 10_000;

/// An outbox in memory, for tests and single-process use.
///
/// Pending and abandoned rows are kept until the process ends; published
/// rows are pruned, oldest first, once more than the retention count of them
/// exist, so memory stays bounded. Clones share the same rows.
#[derive(Clone)]
pub struct InMemoryOutbox {
    store: Arc<Mutex<Store>>,
}

struct Store {
    rows: BTreeMap<u64, OutboxRow>,
    pending: BTreeSet<u64>,
    published: VecDeque<u64>,
    next_id: u64,
    retention: usize,
}

impl Default for InMemoryOutbox {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemoryOutbox {
    /// An empty outbox keeping [`DEFAULT_RETENTION`] published rows.
    pub fn new() -> Self {
        Self::with_retention(DEFAULT_RETENTION)
    }

    /// An empty outbox keeping at most `retention` published rows.
    pub fn with_retention(retention: usize) -> Self {
        Self {
            store: Arc::new(Mutex::new(Store {
                rows: BTreeMap::new(),
                pending: BTreeSet::new(),
                published: VecDeque::new(),
                next_id: 1,
                retention,
            })),
        }
    }

    /// A snapshot of every stored row, in commit order.
    pub fn rows(&self) -> Vec<OutboxRow> {
        self.store().rows.values().cloned().collect()
    }

    /// How many rows are pending.
    pub fn pending_count(&self) -> usize {
        self.store().pending.len()
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        // Every mutation completes before the guard drops, so a poisoned store is consistent.
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for InMemoryOutbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let store = self.store();
        f.debug_struct("InMemoryOutbox")
            .field("rows", &store.rows.len())
            .field("pending", &store.pending.len())
            .field("retention", &store.retention)
            .finish()
    }
}

impl Store {
    fn row_mut(&mut self, id: u64) -> Result<&mut OutboxRow, OutboxError> {
        self.rows.get_mut(&id).ok_or(OutboxError::UnknownRow { id })
    }

    fn publish(&mut self, id: u64) -> Result<(), OutboxError> {
        let row = self.row_mut(id)?;
        if row.status != OutboxStatus::Pending {
            return Ok(());
        }
        row.status = OutboxStatus::Published;
        self.pending.remove(&id);
        self.published.push_back(id);
        while self.published.len() > self.retention {
            if let Some(oldest) = self.published.pop_front() {
                self.rows.remove(&oldest);
            }
        }
        Ok(())
    }
}

impl Outbox for InMemoryOutbox {
    fn append(&self, rows: Vec<NewOutboxRow>) -> BoxFuture<'_, Result<Vec<u64>, OutboxError>> {
        let mut store = self.store();
        let created_at = SystemTime::now();
        let mut ids = Vec::with_capacity(rows.len());
        for NewOutboxRow { envelope, lane } in rows {
            let id = store.next_id;
            store.next_id += 1;
            let row = OutboxRow {
                id,
                partition_key: envelope.partition_key.clone(),
                envelope,
                lane,
                status: OutboxStatus::Pending,
                attempts: 0,
                last_error: None,
                created_at,
            };
            store.rows.insert(id, row);
            store.pending.insert(id);
            ids.push(id);
        }
        drop(store);
        Box::pin(async move { Ok(ids) })
    }

    fn pending(&self, limit: usize) -> BoxFuture<'_, Result<Vec<OutboxRow>, OutboxError>> {
        let store = self.store();
        let rows = store
            .pending
            .iter()
            .filter_map(|id| store.rows.get(id))
            .take(limit)
            .cloned()
            .collect();
        Box::pin(async move { Ok(rows) })
    }

    fn mark_published<'a>(&'a self, ids: &'a [u64]) -> BoxFuture<'a, Result<(), OutboxError>> {
        let result = {
            let mut store = self.store();
            ids.iter().try_for_each(|&id| store.publish(id))
        };
        Box::pin(async move { result })
    }

    fn mark_failed<'a>(&'a self, id: u64, error: &'a str) -> BoxFuture<'a, Result<(), OutboxError>> {
        let result = self.store().row_mut(id).map(|row| {
            if row.status == OutboxStatus::Pending {
                row.attempts += 1;
                row.last_error = Some(error.to_owned());
            }
        });
        Box::pin(async move { result })
    }

    fn mark_abandoned<'a>(&'a self, id: u64, reason: &'a str) -> BoxFuture<'a, Result<(), OutboxError>> {
        let result = {
            let mut store = self.store();
            let abandoned = store.row_mut(id).map(|row| {
                row.status = OutboxStatus::Abandoned;
                row.last_error = Some(reason.to_owned());
            });
            store.pending.remove(&id);
            abandoned
        };
        Box::pin(async move { result })
    }

    fn get(&self, id: u64) -> BoxFuture<'_, Result<Option<OutboxRow>, OutboxError>> {
        let row = self.store().rows.get(&id).cloned();
        Box::pin(async move { Ok(row) })
    }
}

/// What one run of [`OutboxProcessor::publish_pending`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublishReport {
    /// Rows handed to the broker and marked published.
    pub published: usize,
    /// Rows abandoned for an invalid key.
    pub abandoned: usize,
    /// Rows whose publish failed (0 or 1: the run stops at the first failure).
    pub failed: usize,
    /// Rows the broker refused for a reason of their own scope or category
    /// (they stay pending, their scopes wait behind them, the others go on).
    pub refused: usize,
}

/// How many pending rows one fetch reads.
const DEFAULT_BATCH_SIZE: usize = 256;

/// How many bytes of messages one fetch holds at most, by default (rows are
/// bounded to the domain's `max_payload_bytes`, 4 MiB by default).
pub const DEFAULT_BATCH_BYTES: usize = 16 << 20;

/// Publishes pending outbox rows to the broker in commit order.
///
/// Routing: a row with a partition key goes to its key's partition (on the
/// row's lane) when the broker advertises stream partitioning; otherwise to
/// the category's base stream, the key still carried on the envelope.
///
/// Each row's key is validated again before routing. A row with an invalid
/// key, or without a key in a partitioned category, is abandoned at once and
/// never retried, so it cannot hold back the rows behind it.
///
/// When the broker fails part-way, the rows it published are marked
/// published, the failing row is marked failed (and stays pending), and the
/// run stops: no later row is published in this run, whatever its key. That
/// keeps every key's commit order without tracking which keys failed. Runs
/// never overlap, so rows reach the broker in commit order.
///
/// When the broker *refuses* a row for a reason of its own position scope
/// or category ([`Refusal`](crate::broker::Refusal): a category it
/// partitions otherwise, a position it holds from another history), the row
/// stays pending with the reason ([`Outbox::mark_refused`], logged at error
/// level as `outbox.publish_refused`), the rest of its scope (or category)
/// waits behind it for the rest of the run, and every other scope goes on:
/// one refused key or category never holds back the others.
///
/// Fetches are bounded by rows and by bytes ([`Outbox::pending_within`]).
#[derive(Debug)]
pub struct OutboxProcessor {
    outbox: Arc<dyn Outbox>,
    broker: Arc<dyn Broker>,
    rules: KeyRules,
    /// Partitioned category → its key field (for messages naming the field).
    partitioned: HashMap<String, String>,
    batch_size: usize,
    batch_bytes: usize,
    poll_interval: Duration,
    backoff: Backoff,
    wake: Notify,
    running: tokio::sync::Mutex<()>,
}

/// Where a row goes: its position scope (category, key, lane).
type ScopeOf = (String, Option<String>, Lane);

/// What a run has refused so far: scopes and categories whose rows wait,
/// and the rows refused (each once per run).
#[derive(Debug, Default)]
struct Refused {
    scopes: HashSet<ScopeOf>,
    /// Category → the reason its rows are refused.
    categories: HashMap<String, String>,
    rows: HashSet<u64>,
}

/// A routed row of a batch.
struct Routed<'a> {
    row: &'a OutboxRow,
    scope: ScopeOf,
    publication: Publication,
}

impl OutboxProcessor {
    /// A processor publishing `outbox` to `broker` with `config`'s key rules,
    /// poll interval and retry backoff.
    pub fn new(outbox: Arc<dyn Outbox>, broker: Arc<dyn Broker>, config: &Config) -> Self {
        Self {
            outbox,
            broker,
            rules: config.key_rules(),
            partitioned: HashMap::new(),
            batch_size: DEFAULT_BATCH_SIZE,
            batch_bytes: DEFAULT_BATCH_BYTES,
            poll_interval: config.partitioning().poll_interval(),
            backoff: config.partitioning().backoff(),
            wake: Notify::new(),
            running: tokio::sync::Mutex::new(()),
        }
    }

    /// Declares the partitioned categories and their key fields: a row of
    /// one of them without a key is abandoned instead of being published to
    /// the base stream.
    #[must_use]
    pub fn with_partitioned_categories<C, F>(mut self, categories: impl IntoIterator<Item = (C, F)>) -> Self
    where
        C: Into<String>,
        F: Into<String>,
    {
        self.partitioned = categories
            .into_iter()
            .map(|(c, f)| (c.into(), f.into()))
            .collect();
        self
    }

    /// Sets how many rows one fetch reads (at least 1).
    #[must_use]
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size.max(1);
        self
    }

    /// Sets how many bytes of messages one fetch holds at most (at least
    /// 1; default [`DEFAULT_BATCH_BYTES`]); a row bigger than that is
    /// fetched and published alone.
    #[must_use]
    pub fn with_batch_bytes(mut self, batch_bytes: usize) -> Self {
        self.batch_bytes = batch_bytes.max(1);
        self
    }

    /// Wakes the background loop: rows were just committed.
    pub fn notify(&self) {
        self.wake.notify_one();
    }

    /// Publishes every row pending when called, in commit order, stopping at
    /// the first broker failure.
    #[tracing::instrument(skip_all, fields(broker = self.broker.name()))]
    pub async fn publish_pending(&self) -> Result<PublishReport, OutboxError> {
        let _running = self.running.lock().await;
        let mut report = PublishReport::default();
        let mut refused = Refused::default();
        loop {
            let fetched = self
                .outbox
                .pending_within(self.batch_size, self.batch_bytes)
                .await?;
            let before = report;
            self.publish_batch(&fetched.rows, &mut report, &mut refused)
                .await?;
            let done = |r: &PublishReport| r.published + r.abandoned + r.refused;
            if report.failed > 0 || !fetched.more || done(&report) == done(&before) {
                return Ok(report);
            }
        }
    }

    /// Publishes pending rows until `shutdown` is cancelled: right after each
    /// commit ([`OutboxProcessor::notify`]), and every poll interval for rows
    /// committed elsewhere. After a failure it waits out the retry backoff.
    pub async fn run(&self, shutdown: CancellationToken) {
        let mut failures = 0u32;
        loop {
            let wait = match self.publish_pending().await {
                Ok(report) if report.failed == 0 => {
                    failures = 0;
                    self.poll_interval
                }
                Ok(_) => {
                    failures = failures.saturating_add(1);
                    self.backoff.delay(failures)
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    tracing::error!(error = %crate::text::log_text(&error_chain(&error)), "outbox processor cannot read the outbox");
                    self.backoff.delay(failures)
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.wake.notified(), if failures == 0 => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn publish_batch(
        &self,
        rows: &[OutboxRow],
        report: &mut PublishReport,
        refused: &mut Refused,
    ) -> Result<(), OutboxError> {
        let mut pending = Vec::with_capacity(rows.len());
        for row in rows {
            match self.route(row) {
                Ok(publication) => pending.push(Routed {
                    row,
                    scope: (
                        publication.category.clone(),
                        publication.key.clone(),
                        publication.lane,
                    ),
                    publication,
                }),
                Err(invalid) => {
                    tracing::warn!(event = crate::log_events::OUTBOX_ROW_ABANDONED, row = row.id, message_id = %row.envelope.id, error = %crate::text::log_text(&invalid.to_string()),
                        "abandoning outbox row with an invalid partition key");
                    self.outbox.mark_abandoned(row.id, &invalid.to_string()).await?;
                    report.abandoned += 1;
                }
            }
        }
        loop {
            let go = self.not_refused(pending, report, refused).await?;
            if go.is_empty() {
                return Ok(());
            }
            let publications: Vec<Publication> = go.iter().map(|r| r.publication.clone()).collect();
            let error = match self.broker.publish(&publications).await {
                Ok(()) => {
                    let ids: Vec<u64> = go.iter().map(|r| r.row.id).collect();
                    self.outbox.mark_published(&ids).await?;
                    report.published += ids.len();
                    return Ok(());
                }
                Err(error) => error,
            };
            let published = error.published.min(go.len());
            let ids: Vec<u64> = go[..published].iter().map(|r| r.row.id).collect();
            self.outbox.mark_published(&ids).await?;
            report.published += published;
            match error.refusal() {
                Some(refusal) if (published..go.len()).contains(&refusal.index) => {
                    let one = &go[refusal.index];
                    let reason = crate::text::cap_error(error_chain(&*refusal.reason));
                    tracing::error!(event = crate::log_events::OUTBOX_PUBLISH_REFUSED, row = one.row.id, message_id = %one.row.envelope.id,
                        category = %one.scope.0, key = one.scope.1.as_deref().unwrap_or(""), broker = self.broker.name(),
                        broker_position = refusal.broker_position, error = %crate::text::log_text(&reason),
                        "the broker refused an outbox row; it stays pending, the rest of its {} waits behind it",
                        match refusal.extent { RefusedExtent::Category => "category", _ => "key" });
                    self.outbox
                        .mark_refused(&[one.row.id], &reason, refusal.broker_position)
                        .await?;
                    report.refused += 1;
                    refused.rows.insert(one.row.id);
                    refused.scopes.insert(one.scope.clone());
                    if refusal.extent == RefusedExtent::Category {
                        refused.categories.insert(one.scope.0.clone(), reason);
                    }
                    // The rest, from the first not known to be published:
                    // what was written beyond it is dropped by the broker.
                    let index = refusal.index;
                    pending = go
                        .into_iter()
                        .enumerate()
                        .filter(|(i, _)| *i >= published && *i != index)
                        .map(|(_, r)| r)
                        .collect();
                }
                _ => {
                    if let Some(failed) = go.get(published) {
                        let message = crate::text::cap_error(error_chain(&*error.source));
                        tracing::warn!(event = crate::log_events::OUTBOX_PUBLISH_FAILED, row = failed.row.id, broker = self.broker.name(), error = %crate::text::log_text(&message),
                            "outbox publish failed; the row stays pending");
                        self.outbox.mark_failed(failed.row.id, &message).await?;
                        report.failed += 1;
                    }
                    return Ok(());
                }
            }
        }
    }

    /// The rows of `rows` whose scope and category nothing refused in this
    /// run. The first row of each scope of a refused category is refused
    /// too, with the category's reason (once per run).
    async fn not_refused<'a>(
        &self,
        rows: Vec<Routed<'a>>,
        report: &mut PublishReport,
        refused: &mut Refused,
    ) -> Result<Vec<Routed<'a>>, OutboxError> {
        let mut go = Vec::with_capacity(rows.len());
        let mut by_category: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for routed in rows {
            if refused.scopes.contains(&routed.scope) {
                continue;
            }
            if refused.categories.contains_key(&routed.scope.0) {
                refused.scopes.insert(routed.scope.clone());
                if refused.rows.insert(routed.row.id) {
                    by_category
                        .entry(routed.scope.0.clone())
                        .or_default()
                        .push(routed.row.id);
                }
                continue;
            }
            go.push(routed);
        }
        for (category, ids) in by_category {
            let reason = &refused.categories[&category];
            self.outbox.mark_refused(&ids, reason, None).await?;
            report.refused += ids.len();
        }
        Ok(go)
    }

    /// The publication of `row`, or why its key cannot be routed.
    fn route(&self, row: &OutboxRow) -> Result<Publication, InvalidKey> {
        let category = row.envelope.category.as_str();
        let field = self
            .partitioned
            .get(category)
            .map_or("partition_key", String::as_str);
        let key = match &row.partition_key {
            Some(key) => Some(self.rules.validate(field, Some(key))?),
            // A partitioned category's row must have a key: validating the null fails.
            None if self.partitioned.contains_key(category) => Some(self.rules.validate(field, None)?),
            None => None,
        };
        let mut envelope = row.envelope.clone();
        envelope.partition_key.clone_from(&key);
        Ok(match key {
            Some(key) if self.broker.capabilities().stream_partitioning => {
                Publication::to_partition(key, row.lane, envelope)
            }
            _ => Publication::to_base(envelope),
        })
    }
}

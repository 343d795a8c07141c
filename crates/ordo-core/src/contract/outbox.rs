//! The transactional outbox: the rows a unit of work's commit writes, the
//! storage contract an outbox implements, and an in-memory outbox.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use crate::contract::error::OutboxError;
use crate::contract::handler::BoxFuture;
use crate::contract::key::Lane;
use crate::contract::message::Envelope;

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
    /// Its message id is derived from what raised it (a command run's
    /// events are `<command id>/<n>`), so a run again in another process
    /// raises it again under the same id: it is deduplicated by message id,
    /// never by its outbox's producer sequence
    /// ([`Outbox::producer_id`]), which is the outbox's own.
    pub derived_id: bool,
}

impl NewOutboxRow {
    /// A row for `envelope` on `lane`.
    pub fn new(envelope: Envelope, lane: Lane) -> Self {
        Self {
            envelope,
            lane,
            derived_id: false,
        }
    }

    /// `self`, its message id derived from what raised it (see
    /// [`NewOutboxRow::derived_id`]).
    #[must_use]
    pub fn with_derived_id(mut self) -> Self {
        self.derived_id = true;
        self
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
    /// Its message id is derived from what raised it (see
    /// [`NewOutboxRow::derived_id`]).
    pub derived_id: bool,
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

    /// The producer id under which the broker may deduplicate this
    /// outbox's rows by their row id, as a sequence
    /// ([`ProducerSequence`](crate::contract::broker::ProducerSequence)),
    /// instead of keeping every message id. Only for an outbox whose rows
    /// exist in one process, whose ids grow with commit order and whose
    /// id is new whenever its rows start again from scratch (the in-memory
    /// outbox: a random id per outbox). `None` (the default): rows are
    /// deduplicated by message id, or by their position.
    fn producer_id(&self) -> Option<&str> {
        None
    }

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

    /// Up to `limit` pending rows with an id above `after`, in commit
    /// order, bounded like [`Outbox::pending_within`]: the rows behind
    /// those a processor has in flight, so it fetches the next batch while
    /// the broker publishes the current one (only an outbox with a
    /// [`Outbox::producer_id`] is read ahead this way). The default reads
    /// [`Outbox::pending_within`] and keeps the rows above `after`, so it
    /// may return fewer rows (none) with `more` set; an outbox read ahead
    /// implements it directly.
    fn pending_after(
        &self,
        after: u64,
        limit: usize,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<PendingRows, OutboxError>> {
        Box::pin(async move {
            let mut fetched = self.pending_within(limit, max_bytes).await?;
            fetched.rows.retain(|row| row.id > after);
            Ok(fetched)
        })
    }

    /// The broker refused rows `ids` (each the first of its position scope
    /// in the run) for a reason of that scope's or category's own
    /// ([`Refusal`](crate::contract::broker::Refusal)): a category the broker
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

    fn pending_after(
        &self,
        after: u64,
        limit: usize,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<PendingRows, OutboxError>> {
        (**self).pending_after(after, limit, max_bytes)
    }

    fn mark_refused<'a>(
        &'a self,
        ids: &'a [u64],
        reason: &'a str,
        broker_position: Option<u64>,
    ) -> BoxFuture<'a, Result<(), OutboxError>> {
        (**self).mark_refused(ids, reason, broker_position)
    }

    fn producer_id(&self) -> Option<&str> {
        (**self).producer_id()
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
    /// New with every outbox: its rows' producer id.
    producer: Arc<str>,
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
            producer: new_producer_id(),
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

    /// Up to `limit` pending rows from id `first` on, in commit order,
    /// their payloads `max_bytes` at most between them (at least one row).
    /// A row's payload is shared with its clone, not copied.
    fn pending_from(&self, first: u64, limit: usize, max_bytes: usize) -> PendingRows {
        let mut fetched = PendingRows::default();
        let mut bytes = 0usize;
        for row in self.pending.range(first..).filter_map(|id| self.rows.get(id)) {
            let size = row.envelope.payload.len();
            if fetched.rows.len() == limit || (!fetched.rows.is_empty() && bytes + size > max_bytes) {
                fetched.more = true;
                break;
            }
            bytes += size;
            fetched.rows.push(row.clone());
        }
        fetched
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
        for NewOutboxRow {
            envelope,
            lane,
            derived_id,
        } in rows
        {
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
                derived_id,
            };
            store.rows.insert(id, row);
            store.pending.insert(id);
            ids.push(id);
        }
        drop(store);
        Box::pin(async move { Ok(ids) })
    }

    fn pending(&self, limit: usize) -> BoxFuture<'_, Result<Vec<OutboxRow>, OutboxError>> {
        let rows = self.store().pending_from(0, limit, usize::MAX).rows;
        Box::pin(async move { Ok(rows) })
    }

    fn pending_within(
        &self,
        limit: usize,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<PendingRows, OutboxError>> {
        let fetched = self.store().pending_from(0, limit, max_bytes);
        Box::pin(async move { Ok(fetched) })
    }

    fn pending_after(
        &self,
        after: u64,
        limit: usize,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<PendingRows, OutboxError>> {
        let fetched = self
            .store()
            .pending_from(after.saturating_add(1), limit, max_bytes);
        Box::pin(async move { Ok(fetched) })
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

    fn producer_id(&self) -> Option<&str> {
        Some(&self.producer)
    }
}

/// A producer id no other outbox has: 64 random bits, as 16 hex digits.
fn new_producer_id() -> Arc<str> {
    let bits = uuid::Uuid::new_v4().as_u64_pair().0;
    Arc::from(format!("{bits:016x}"))
}

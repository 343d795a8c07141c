//! The outbox processor: publishes the rows a unit of work's commit wrote to
//! the broker, in commit order.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::contract::backoff::Backoff;
use crate::contract::broker::{Broker, Publication, RefusedExtent};
use crate::contract::config::Config;
use crate::contract::error::{OutboxError, error_chain};
use crate::contract::key::{InvalidKey, KeyRules, Lane};
use crate::contract::outbox::{Outbox, OutboxRow};

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

/// How many pending rows one fetch reads (within [`DEFAULT_BATCH_BYTES`]):
/// enough for a broker to keep several calls out at once (the Redis broker
/// sends 128 per call, two at a time), so it runs one while the next is
/// encoded.
const DEFAULT_BATCH_SIZE: usize = 1024;

/// How many pending rows one fetch reads from an outbox read ahead (one
/// with a producer id, see [`OutboxProcessor::publish_pending`]): enough
/// for each stream to have many rows in one batch (the Redis broker sends
/// each stream's together), so a batch is many calls and the pause between
/// two batches a small share of it.
const READ_AHEAD_BATCH_SIZE: usize = 16_384;

/// Rows one read of an outbox read ahead takes (see [`OutboxProcessor::fetch`]).
const FETCH_SLICE: usize = 256;

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
/// or category ([`Refusal`](crate::contract::broker::Refusal): a category it
/// partitions otherwise, a position it holds from another history), the row
/// stays pending with the reason ([`Outbox::mark_refused`], logged at error
/// level as `outbox.publish_refused`), the rest of its scope (or category)
/// waits behind it for the rest of the run, and every other scope goes on:
/// one refused key or category never holds back the others.
///
/// Fetches are bounded by rows and by bytes ([`Outbox::pending_within`]).
///
/// An outbox with a producer id ([`Outbox::producer_id`], the in-memory
/// one) has its rows published with that id and their row id as sequence
/// ([`Publication::with_producer`]), but for rows whose message id is
/// derived from what raised them ([`OutboxRow::derived_id`]). The rules
/// above keep what that deduplication needs: each call holds, per stream,
/// a prefix of the stream's rows not known to be published.
#[derive(Debug)]
pub struct OutboxProcessor {
    outbox: Arc<dyn Outbox>,
    broker: Arc<dyn Broker>,
    /// The outbox's producer id, when its rows are deduplicated by
    /// producer sequence ([`Outbox::producer_id`]).
    producer: Option<Arc<str>>,
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

/// A batch of pending rows, fetched and routed.
#[derive(Debug)]
struct Fetched {
    /// Row id and publication of each row routed, in commit order.
    publications: Vec<(u64, Publication)>,
    /// Rows abandoned for an invalid key.
    abandoned: usize,
    /// Whether the fetch stopped at a bound: more rows may be pending.
    more: bool,
    /// The last row fetched (routed or abandoned).
    last: Option<u64>,
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

/// The scope a publication's key is refused in: its category, key and lane.
fn scope_of(publication: &Publication) -> ScopeOf {
    (
        publication.category.clone(),
        publication.key.clone(),
        publication.lane,
    )
}

impl OutboxProcessor {
    /// A processor publishing `outbox` to `broker` with `config`'s key rules,
    /// poll interval and retry backoff.
    pub fn new(outbox: Arc<dyn Outbox>, broker: Arc<dyn Broker>, config: &Config) -> Self {
        let producer: Option<Arc<str>> = outbox.producer_id().map(Arc::from);
        Self {
            batch_size: if producer.is_some() {
                READ_AHEAD_BATCH_SIZE
            } else {
                DEFAULT_BATCH_SIZE
            },
            producer,
            outbox,
            broker,
            rules: config.key_rules(),
            partitioned: HashMap::new(),
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

    /// Sets how many rows one fetch reads (at least 1; by default 16,384
    /// from an outbox with a producer id, else 1,024).
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
    ///
    /// With an outbox that has a producer id, the next batch is fetched
    /// and routed while the broker publishes the current one (the outbox
    /// hands out the rows behind those in flight,
    /// [`Outbox::pending_after`]); it is handed to the broker only once the
    /// current one is answered, so each call still holds, per stream, a
    /// prefix of the rows not known to be published.
    #[tracing::instrument(skip_all, fields(broker = self.broker.name()))]
    pub async fn publish_pending(&self) -> Result<PublishReport, OutboxError> {
        let _running = self.running.lock().await;
        let mut report = PublishReport::default();
        let mut refused = Refused::default();
        let mut batch = self.fetch(None).await?;
        // The rows of the batch before, published and not marked yet.
        let mut unmarked = Vec::new();
        loop {
            let before = report;
            report.abandoned += batch.abandoned;
            let ahead = match batch.last {
                Some(last) if batch.more && self.producer.is_some() => Some(last),
                _ => None,
            };
            // Biased: the batch's first call goes out before the batch
            // before is marked published and the next one read, so they
            // overlap.
            let (published, (marked, next)) = tokio::join!(
                biased;
                self.publish_batch(batch.publications, &mut report, &mut refused),
                async {
                    let marked = self.mark_published(&std::mem::take(&mut unmarked)).await;
                    let next = match ahead {
                        Some(last) if marked.is_ok() => Some(self.fetch(Some(last)).await),
                        _ => None,
                    };
                    (marked, next)
                }
            );
            marked?;
            let published = published?;
            let next = next.transpose()?;
            if report.failed > 0 || !batch.more {
                self.mark_published(&published).await?;
                // What was read ahead stays pending for the next run.
                report.abandoned += next.map_or(0, |next| next.abandoned);
                return Ok(report);
            }
            let done = |r: &PublishReport| r.published + r.abandoned + r.refused;
            batch = match next {
                // What follows this batch (nothing, when nothing does).
                Some(next) if next.last.is_some() || !next.more => {
                    unmarked = published;
                    next
                }
                // A fetch from the start that got nowhere: every row it
                // read waits behind a refusal.
                _ if done(&report) == done(&before) => {
                    self.mark_published(&published).await?;
                    return Ok(report);
                }
                _ => {
                    // A fetch from the start reads what is not marked.
                    self.mark_published(&published).await?;
                    self.fetch(None).await?
                }
            };
        }
    }

    /// Marks rows `ids` published, [`FETCH_SLICE`] at a time with a yield
    /// between, so that a batch published meanwhile on this task sends its
    /// next calls.
    async fn mark_published(&self, ids: &[u64]) -> Result<(), OutboxError> {
        for slice in ids.chunks(FETCH_SLICE) {
            self.outbox.mark_published(slice).await?;
            if ids.len() > FETCH_SLICE {
                tokio::task::yield_now().await;
            }
        }
        Ok(())
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
                    tracing::error!(error = %crate::contract::text::log_text(&error_chain(&error)), "outbox processor cannot read the outbox");
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

    /// The next batch of pending rows (`after` a row id, or from the
    /// first), routed: a row with an invalid key is abandoned at once.
    ///
    /// An outbox read ahead ([`Outbox::producer_id`]) is read in slices of
    /// [`FETCH_SLICE`] rows, yielding between them: the batch published
    /// meanwhile on this task (see [`OutboxProcessor::publish_pending`])
    /// sends its next calls as its replies come, instead of waiting for the
    /// whole read while Redis idles. The slices together hold at least one
    /// row, and the batch's bytes of messages at most but for one row (each
    /// slice takes at least one, as one read does).
    async fn fetch(&self, after: Option<u64>) -> Result<Fetched, OutboxError> {
        let slice = if self.producer.is_some() {
            FETCH_SLICE
        } else {
            self.batch_size
        };
        let mut batch = Fetched {
            publications: Vec::new(),
            abandoned: 0,
            more: true,
            last: None,
        };
        let (mut read, mut bytes) = (0, 0);
        while batch.more && read < self.batch_size && bytes < self.batch_bytes {
            let limit = slice.min(self.batch_size - read);
            let left = self.batch_bytes - bytes;
            let fetched = match batch.last.or(after) {
                Some(after) => self.outbox.pending_after(after, limit, left).await?,
                None => self.outbox.pending_within(limit, left).await?,
            };
            batch.more = fetched.more;
            let Some(last) = fetched.rows.last().map(|row| row.id) else {
                break;
            };
            batch.last = Some(last);
            read += fetched.rows.len();
            batch.publications.reserve(fetched.rows.len());
            // Each row's message moves into its publication: no copy of it.
            for row in fetched.rows {
                bytes += row.envelope.payload.len();
                match self.key_of(&row) {
                    Ok(key) => batch.publications.push((row.id, self.route(row, key))),
                    Err(invalid) => {
                        tracing::warn!(event = crate::contract::log_events::OUTBOX_ROW_ABANDONED, row = row.id, message_id = %row.envelope.id, error = %crate::contract::text::log_text(&invalid.to_string()),
                            "abandoning outbox row with an invalid partition key");
                        self.outbox.mark_abandoned(row.id, &invalid.to_string()).await?;
                        batch.abandoned += 1;
                    }
                }
            }
            if self.producer.is_none() {
                // One read: only an outbox read ahead reads after a row.
                break;
            }
            tokio::task::yield_now().await;
        }
        Ok(batch)
    }

    /// Publishes `pending` (row id, publication); returns the ids of the
    /// rows published and not marked yet (the caller marks them while the
    /// next batch goes out).
    async fn publish_batch(
        &self,
        mut pending: Vec<(u64, Publication)>,
        report: &mut PublishReport,
        refused: &mut Refused,
    ) -> Result<Vec<u64>, OutboxError> {
        loop {
            let go = self.not_refused(pending, report, refused).await?;
            if go.is_empty() {
                return Ok(Vec::new());
            }
            let (ids, publications): (Vec<u64>, Vec<Publication>) = go.into_iter().unzip();
            let error = match self.broker.publish(&publications).await {
                Ok(()) => {
                    report.published += ids.len();
                    return Ok(ids);
                }
                Err(error) => error,
            };
            let published = error.published.min(ids.len());
            self.outbox.mark_published(&ids[..published]).await?;
            report.published += published;
            match error.refusal() {
                Some(refusal) if (published..ids.len()).contains(&refusal.index) => {
                    let (id, one) = (ids[refusal.index], &publications[refusal.index]);
                    let scope = scope_of(one);
                    let reason = crate::contract::text::cap_error(error_chain(&*refusal.reason));
                    tracing::error!(event = crate::contract::log_events::OUTBOX_PUBLISH_REFUSED, row = id, message_id = %one.envelope.id,
                        category = %scope.0, key = scope.1.as_deref().unwrap_or(""), broker = self.broker.name(),
                        broker_position = refusal.broker_position, error = %crate::contract::text::log_text(&reason),
                        "the broker refused an outbox row; it stays pending, the rest of its {} waits behind it",
                        match refusal.extent { RefusedExtent::Category => "category", _ => "key" });
                    self.outbox
                        .mark_refused(&[id], &reason, refusal.broker_position)
                        .await?;
                    report.refused += 1;
                    refused.rows.insert(id);
                    if refusal.extent == RefusedExtent::Category {
                        refused.categories.insert(scope.0.clone(), reason);
                    }
                    refused.scopes.insert(scope);
                    // The rest, from the first not known to be published:
                    // what was written beyond it is dropped by the broker.
                    let index = refusal.index;
                    pending = ids
                        .into_iter()
                        .zip(publications)
                        .enumerate()
                        .filter(|(i, _)| *i >= published && *i != index)
                        .map(|(_, r)| r)
                        .collect();
                }
                _ => {
                    if let Some(&failed) = ids.get(published) {
                        let message = crate::contract::text::cap_error(error_chain(&*error.source));
                        tracing::warn!(event = crate::contract::log_events::OUTBOX_PUBLISH_FAILED, row = failed, broker = self.broker.name(), error = %crate::contract::text::log_text(&message),
                            "outbox publish failed; the row stays pending");
                        self.outbox.mark_failed(failed, &message).await?;
                        report.failed += 1;
                    }
                    return Ok(Vec::new());
                }
            }
        }
    }

    /// The rows of `rows` (row id, publication) whose scope and category
    /// nothing refused in this run. The first row of each scope of a
    /// refused category is refused too, with the category's reason (once
    /// per run).
    async fn not_refused(
        &self,
        rows: Vec<(u64, Publication)>,
        report: &mut PublishReport,
        refused: &mut Refused,
    ) -> Result<Vec<(u64, Publication)>, OutboxError> {
        if refused.scopes.is_empty() && refused.categories.is_empty() {
            return Ok(rows);
        }
        let mut go = Vec::with_capacity(rows.len());
        let mut by_category: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for (id, publication) in rows {
            let scope = scope_of(&publication);
            if refused.scopes.contains(&scope) {
                continue;
            }
            if refused.categories.contains_key(&scope.0) {
                if refused.rows.insert(id) {
                    by_category.entry(scope.0.clone()).or_default().push(id);
                }
                refused.scopes.insert(scope);
                continue;
            }
            go.push((id, publication));
        }
        for (category, ids) in by_category {
            let reason = &refused.categories[&category];
            self.outbox.mark_refused(&ids, reason, None).await?;
            report.refused += ids.len();
        }
        Ok(go)
    }

    /// The validated partition key of `row`, or why it cannot be routed.
    fn key_of(&self, row: &OutboxRow) -> Result<Option<String>, InvalidKey> {
        let category = row.envelope.category.as_str();
        let field = self
            .partitioned
            .get(category)
            .map_or("partition_key", String::as_str);
        Ok(match &row.partition_key {
            Some(key) => Some(self.rules.validate(field, Some(key))?),
            // A partitioned category's row must have a key: validating the null fails.
            None if self.partitioned.contains_key(category) => Some(self.rules.validate(field, None)?),
            None => None,
        })
    }

    /// The publication of `row` under its validated `key`: the row's
    /// message moves into it, uncopied.
    fn route(&self, row: OutboxRow, key: Option<String>) -> Publication {
        let (id, lane, derived_id) = (row.id, row.lane, row.derived_id);
        let mut envelope = row.envelope;
        envelope.partition_key.clone_from(&key);
        let publication = match key {
            Some(key) if self.broker.capabilities().stream_partitioning => {
                Publication::to_partition(key, lane, envelope)
            }
            _ => Publication::to_base(envelope),
        };
        match &self.producer {
            Some(producer) if !derived_id => publication.with_producer(Arc::clone(producer), id),
            _ => publication,
        }
    }
}

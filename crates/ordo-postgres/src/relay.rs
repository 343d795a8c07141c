//! [`PgRelay`]: publishes the PostgreSQL outbox to a broker, woken by
//! NOTIFY, with a slow poll as a fallback.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ordo_core::contract::backoff::Backoff;
use ordo_core::contract::broker::Broker;
use ordo_core::contract::config::Config;
use ordo_core::contract::error::error_chain;
use ordo_core::runtime::domain::Domain;
use ordo_core::runtime::outbox::{OutboxProcessor, PublishReport};
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::outbox::PgOutbox;
use crate::status::OutboxStatusReport;

/// Rows one fetch reads, by default.
pub const DEFAULT_BATCH_SIZE: usize = 512;
/// Bytes of envelopes one fetch holds at most, by default (a bigger row is
/// fetched alone).
pub const DEFAULT_BATCH_BYTES: usize = ordo_core::runtime::outbox::DEFAULT_BATCH_BYTES;
/// The fallback poll when no NOTIFY arrives, by default.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How long published rows are kept, by default.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// How often the relay deletes published rows past the retention.
const CLEANUP_INTERVAL: Duration = Duration::from_secs(10);
/// Rows one cleanup statement deletes at most (short transactions).
const CLEANUP_BATCH: i64 = 10_000;
/// How often the relay refreshes its status metrics.
const STATUS_INTERVAL: Duration = Duration::from_secs(5);

/// Publishes the PostgreSQL outbox to a broker.
///
/// Any number of relays (one per process, or several) can run against one
/// database: each leases a fair share of the 64 relay slots, and publishes
/// only its slots' rows, per position scope in commit order; a crashed or
/// stalled relay's slots are taken over when its leases expire. Every
/// publication carries its position, so the broker drops a re-publish (see
/// docs/POSTGRES.md).
///
/// The loop publishes at once when a commit's NOTIFY arrives, otherwise
/// every poll interval; after a failure it waits out the retry backoff.
/// Rows with an invalid key, and rows that cannot be read, are abandoned at
/// once. A row the broker refuses for its key's or category's own reason
/// (a category partitioned otherwise, a position of another history of the
/// database) stays pending and holds back its key only. Fetches are bounded
/// by rows and bytes. Published rows older than the retention are deleted.
#[derive(Debug)]
pub struct PgRelay {
    outbox: PgOutbox,
    processor: OutboxProcessor,
    poll_interval: Duration,
    retention: Duration,
    backoff: Backoff,
}

impl PgRelay {
    /// A relay publishing `outbox` to `broker` with `config`'s key rules and
    /// retry backoff.
    pub fn new(outbox: PgOutbox, broker: Arc<dyn Broker>, config: &Config) -> Self {
        let processor = OutboxProcessor::new(Arc::new(outbox.clone()), broker, config)
            .with_batch_size(DEFAULT_BATCH_SIZE)
            .with_batch_bytes(DEFAULT_BATCH_BYTES);
        Self {
            outbox,
            processor,
            poll_interval: DEFAULT_POLL_INTERVAL,
            retention: DEFAULT_RETENTION,
            backoff: config.partitioning().backoff(),
        }
    }

    /// A relay for `domain`: its broker, configuration and partitioned
    /// categories (a row of one of them without a key is abandoned),
    /// including those of handlers registered by type only
    /// (`DomainBuilder::event_handler_type`, what a relay-only process does).
    pub fn for_domain(outbox: PgOutbox, domain: &Domain) -> Self {
        let mut relay = Self::new(outbox, Arc::clone(domain.broker()), domain.config());
        let partitioned: Vec<(String, String)> = domain
            .partitioned_categories()
            .into_iter()
            .map(|(category, field)| (category.to_owned(), field.to_owned()))
            .collect();
        relay.processor = relay.processor.with_partitioned_categories(partitioned);
        relay
    }

    /// Rows per fetch (at least 1; default 512).
    #[must_use]
    pub fn batch_size(mut self, rows: usize) -> Self {
        self.processor = self.processor.with_batch_size(rows);
        self
    }

    /// Bytes of envelopes per fetch (at least 1; default 16 MiB): what a
    /// relay holds in memory at once, about three times over while it
    /// publishes. A row bigger than that is fetched and published alone;
    /// see [`PgOutboxBuilder::max_row_bytes`](crate::PgOutboxBuilder::max_row_bytes)
    /// for rows too big to publish at all.
    #[must_use]
    pub fn batch_bytes(mut self, bytes: usize) -> Self {
        self.processor = self.processor.with_batch_bytes(bytes);
        self
    }

    /// The fallback poll interval (default 1 s). Must stay under a third of
    /// the lease TTL, since leases are renewed from the loop.
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How long published rows are kept (default 24 h).
    #[must_use]
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// The outbox.
    pub fn outbox(&self) -> &PgOutbox {
        &self.outbox
    }

    /// Publishes every row of this relay's slots pending now (leasing its
    /// slots first when due), stopping at the first broker failure; the
    /// published rows are marked when it returns.
    pub async fn publish_pending(&self) -> Result<PublishReport> {
        let report = self.processor.publish_pending().await.map_err(Error::Outbox)?;
        // Marks run beside the next batches; what this returns is marked.
        self.outbox.flush_marks().await?;
        Ok(report)
    }

    /// Deletes published rows older than the retention; returns how many.
    pub async fn cleanup(&self) -> Result<u64> {
        let retention_ms = i64::try_from(self.retention.as_millis()).unwrap_or(i64::MAX);
        let mut deleted = 0;
        loop {
            let done = sqlx::query(AssertSqlSafe(self.outbox.sql().cleanup.clone()))
                .bind(retention_ms)
                .bind(CLEANUP_BATCH)
                .execute(self.outbox.pool())
                .await?
                .rows_affected();
            deleted += done;
            if done < u64::try_from(CLEANUP_BATCH).unwrap_or(u64::MAX) {
                return Ok(deleted);
            }
        }
    }

    /// Runs until `shutdown` is cancelled, then releases this relay's slots.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<()> {
        if self.poll_interval >= self.outbox.lease_ttl() / 3 {
            return Err(Error::Config {
                key: "poll_interval",
                reason: format!(
                    "must be under a third of the lease TTL ({:?}), got {:?}",
                    self.outbox.lease_ttl(),
                    self.poll_interval
                ),
            });
        }
        let relay = self.outbox.relay_id().to_owned();
        let slots = crate::schema::SLOTS;
        tracing::info!(
            event = ordo_core::contract::log_events::RELAY_STARTED,
            %relay,
            slots,
            lease_ttl = ?self.outbox.lease_ttl(),
            "relay started, {slots} slots"
        );
        let result = tokio::join!(self.publish_loop(&shutdown), self.housekeeping(&shutdown)).0;
        tracing::info!(event = ordo_core::contract::log_events::RELAY_STOPPED, %relay, "relay stopped");
        result
    }

    /// Publishes on every NOTIFY and poll until `shutdown`, then releases
    /// the slots.
    async fn publish_loop(&self, shutdown: &CancellationToken) -> Result<()> {
        let mut listener = self.listen().await;
        let mut failures = 0u32;
        loop {
            let wait = match self.processor.publish_pending().await {
                Ok(report) => {
                    if report.published > 0 {
                        metrics::counter!("ordo_outbox_published_total").increment(report.published as u64);
                    }
                    if report.abandoned > 0 {
                        metrics::counter!("ordo_outbox_abandoned_total").increment(report.abandoned as u64);
                    }
                    if report.refused > 0 {
                        metrics::counter!("ordo_outbox_refused_total").increment(report.refused as u64);
                    }
                    if report.failed == 0 {
                        failures = 0;
                        // A full batch may leave more: the processor already looped until a short one.
                        self.poll_interval
                    } else {
                        failures = failures.saturating_add(1);
                        self.backoff.delay(failures)
                    }
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    tracing::error!(error = %ordo_core::contract::text::log_text(&error_chain(&error)), "outbox relay cannot read the outbox");
                    self.backoff.delay(failures)
                }
            };
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => {
                        if let Err(error) = self.outbox.release_leases().await {
                            tracing::warn!(error = %error_chain(&error), "could not release the relay's slots");
                        }
                        return Ok(());
                    }
                    () = tokio::time::sleep_until(deadline) => break,
                    woke = recv(&mut listener), if failures == 0 && listener.is_some() => {
                        if woke {
                            // Drain what else arrived: one run publishes every commit so far.
                            if let Some(l) = listener.as_mut() {
                                while l.next_buffered().is_some() {}
                            }
                            break;
                        }
                        tracing::warn!("outbox relay lost its LISTEN connection; polling until it is back");
                        listener = None;
                    }
                }
            }
            if listener.is_none() && failures == 0 {
                listener = self.listen().await;
            }
        }
    }

    /// Refreshes the status metrics and deletes published rows past the
    /// retention, until `shutdown`. Beside the publishing loop, not in it:
    /// the status counts and a cleanup can take tens of milliseconds on a
    /// large outbox, which would delay every commit waiting to be published.
    async fn housekeeping(&self, shutdown: &CancellationToken) {
        let mut last_cleanup = Instant::now();
        let mut last_status: Option<Instant> = None;
        loop {
            if last_cleanup.elapsed() >= CLEANUP_INTERVAL {
                last_cleanup = Instant::now();
                if let Err(error) = self.cleanup().await {
                    tracing::warn!(error = %error_chain(&error), "outbox cleanup failed");
                }
            }
            if last_status.is_none_or(|at| at.elapsed() >= STATUS_INTERVAL) {
                last_status = Some(Instant::now());
                match OutboxStatusReport::read(&self.outbox).await {
                    Ok(status) => status.record_metrics(),
                    Err(error) => tracing::debug!(error = %error_chain(&error), "outbox status unavailable"),
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(STATUS_INTERVAL.min(CLEANUP_INTERVAL)) => {}
            }
        }
    }

    async fn listen(&self) -> Option<PgListener> {
        let result = async {
            let mut listener = PgListener::connect_with(self.outbox.pool()).await?;
            listener.listen(&self.outbox.channel()).await?;
            Ok::<_, sqlx::Error>(listener)
        }
        .await;
        match result {
            Ok(listener) => Some(listener),
            Err(error) => {
                tracing::warn!(error = %error_chain(&error), "outbox relay cannot LISTEN; polling only");
                None
            }
        }
    }
}

/// Waits for a notification: `true` when one came, `false` when the
/// connection is gone.
async fn recv(listener: &mut Option<PgListener>) -> bool {
    match listener {
        Some(listener) => listener.try_recv().await.is_ok_and(|n| n.is_some()),
        None => std::future::pending().await,
    }
}

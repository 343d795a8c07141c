//! An Ordo engine instance as the benchmarks run it: the Redis broker, a
//! domain with one partitioned handler of [`BenchEvent`]s, and Ordo's own
//! publish path (unit of work, outbox, outbox processor) to fill partition
//! streams.
//!
//! The handler ([`BenchHandler`]) is trivial on purpose: it decodes the
//! event, checks that each key's events arrive in order, and counts, all in
//! a [`Tally`] the benchmark reads. It records when the first and the last
//! message were handled (so a drain's rate excludes start-up), and, for
//! events whose unit of work carried [`COMMITTED_AT_US`] in its metadata,
//! the time from commit to handler start.
//!
//! Benchmarks that run on a shared Redis clear their keys before and after
//! ([`delete_matching`]); [`BENCH_KEYS`] are this module's.

use std::collections::BTreeMap;
use std::future::Future;
use std::num::{NonZeroU32, NonZeroUsize};
use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, ensure};
use fred::clients::Client;
use fred::prelude::ClientLike as _;
use fred::types::cluster::ClusterRouting;
use fred::types::{ClusterHash, CustomCommand, Value};
use ordo::contract::handler::{HandlerContext, HandlerResult};
use ordo::contract::message::Metadata;
use ordo::event_handler;
use ordo_core::contract::config::Config;
use ordo_core::runtime::domain::{Domain, RunningDomain};
use ordo_redis::RedisBroker;

use crate::latency::LatencyRecorder;
use crate::redis::BenchRedis;
use crate::redis_info;
use crate::workload::{BenchAggregate, BenchEvent};

/// The handler's name: the consumer group of the `bench` partitions (the
/// `name` of [`BenchHandler`]'s `#[event_handler]`).
pub const GROUP: &str = "OrdoBench";

/// The unit-of-work metadata entry holding the commit time, in µs since the
/// Unix epoch (the publisher and the handler share the process's clock).
pub const COMMITTED_AT_US: &str = "bench_committed_at_us";

/// The keys the `bench` category's runs leave in Redis: its partitions
/// (streams and bookkeeping, tagged `{bench:...}`), its per-slot index
/// buckets and registry copies (`{<slot tag>}:bench:...`), the category's
/// registry and index directory (`{bench}:...`), its base stream's names
/// (`bench`, `bench:...`) and the group's instance set (see
/// `ordo_redis::layout`).
pub const BENCH_KEYS: [&str; 6] = [
    "bench",
    "bench:*",
    "{bench:*",
    "{*}:bench:*",
    "{bench}:*",
    "ordo:instances:OrdoBench",
];

/// What the handler saw, shared with the benchmark.
#[derive(Debug)]
pub struct Tally {
    /// The origin of the handled-at times.
    origin: Instant,
    handled: AtomicU64,
    /// The sum of the handled events' per-key numbers.
    checksum: AtomicU64,
    /// Events that were not their key's next one (a skip or a repeat).
    out_of_order: AtomicU64,
    /// Per key index, the number of the event expected next: one past the
    /// last one handled (4 bytes a key, so a million keys take 4 MB).
    next: Box<[AtomicU32]>,
    /// With [`Tally::with_events`]: which events were handled, one bit each.
    seen: Option<Seen>,
    /// Nanoseconds from `origin` to the first and the last handler start.
    first_ns: AtomicU64,
    last_ns: AtomicU64,
    /// Commit to handler start, for events that carried their commit time.
    latencies: Mutex<LatencyRecorder>,
}

impl Tally {
    /// A tally for events over `keys` keys.
    pub fn new(keys: NonZeroUsize) -> Arc<Self> {
        Arc::new(Self::of(keys, None))
    }

    /// A tally for `per_key` events (seqs `0..per_key`) of each of `keys`
    /// keys that also records which events were handled (one bit each), so
    /// that [`Tally::missing`] and [`Tally::repeats`] name what was lost or
    /// handled twice, per event.
    pub fn with_events(keys: NonZeroUsize, per_key: NonZeroU32) -> Arc<Self> {
        Arc::new(Self::of(keys, Some(Seen::new(keys.get(), per_key.get()))))
    }

    fn of(keys: NonZeroUsize, seen: Option<Seen>) -> Self {
        Self {
            origin: Instant::now(),
            handled: AtomicU64::new(0),
            checksum: AtomicU64::new(0),
            out_of_order: AtomicU64::new(0),
            next: (0..keys.get()).map(|_| AtomicU32::new(0)).collect(),
            seen,
            first_ns: AtomicU64::new(u64::MAX),
            last_ns: AtomicU64::new(0),
            latencies: Mutex::new(LatencyRecorder::new()),
        }
    }

    /// With [`Tally::with_events`]: the events never handled; `None` for a
    /// tally that does not record events.
    pub fn missing(&self) -> Option<u64> {
        self.seen.as_ref().map(Seen::missing)
    }

    /// With [`Tally::with_events`]: handler runs of an event already
    /// handled; `None` for a tally that does not record events.
    pub fn repeats(&self) -> Option<u64> {
        self.seen
            .as_ref()
            .map(|seen| seen.repeats.load(Ordering::Acquire))
    }

    /// Keys whose last handled event is not their `per_key`th (the last
    /// published): a key that stopped short, or whose last run was not its
    /// last event.
    pub fn keys_short_of(&self, per_key: u32) -> u64 {
        self.next
            .iter()
            .filter(|next| next.load(Ordering::Acquire) != per_key)
            .count() as u64
    }

    /// Messages handled so far.
    pub fn handled(&self) -> u64 {
        self.handled.load(Ordering::Acquire)
    }

    /// The sum of the handled events' per-key numbers.
    pub fn checksum(&self) -> u64 {
        self.checksum.load(Ordering::Acquire)
    }

    /// Events that arrived out of their key's order (or twice).
    pub fn out_of_order(&self) -> u64 {
        self.out_of_order.load(Ordering::Acquire)
    }

    /// When the first handler run started; `None` before any.
    pub fn first_handled(&self) -> Option<Instant> {
        match self.first_ns.load(Ordering::Acquire) {
            u64::MAX => None,
            ns => Some(self.origin + Duration::from_nanos(ns)),
        }
    }

    /// When the last handler run so far started; `None` before any.
    pub fn last_handled(&self) -> Option<Instant> {
        self.first_handled()?;
        Some(self.origin + Duration::from_nanos(self.last_ns.load(Ordering::Acquire)))
    }

    /// The commit-to-handler-start latencies recorded so far (taken out).
    pub fn take_latencies(&self) -> LatencyRecorder {
        std::mem::take(&mut *self.latencies.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Waits until `count` messages were handled; fails after `deadline`.
    /// Polls the counter: the handled-at times come from the handler itself,
    /// so the poll period does not enter any figure.
    pub async fn wait_for(&self, count: u64, deadline: Duration) -> Result<()> {
        let started = Instant::now();
        while self.handled() < count {
            ensure!(
                started.elapsed() < deadline,
                "handled {} of {count} events within {deadline:?}",
                self.handled()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }

    /// Counts one handler run of `event`, whose message carried `metadata`.
    fn record(&self, event: &BenchEvent, metadata: &Metadata) -> HandlerResult {
        let now = SystemTime::now();
        let at = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if let Some(committed) = metadata.get(COMMITTED_AT_US) {
            let committed: u64 = committed.parse()?;
            let latency = unix_micros(now).saturating_sub(committed);
            self.latencies
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .record(Duration::from_micros(latency));
        }
        let index = key_index(&event.key)
            .filter(|index| *index < self.next.len())
            .ok_or_else(|| format!("`{}` is not one of this run's keys", event.key))?;
        let seq = u32::try_from(event.seq)
            .ok()
            .filter(|seq| *seq < u32::MAX)
            .ok_or_else(|| {
                format!(
                    "event {} of `{}`: numbers go up to 2^32 - 2",
                    event.seq, event.key
                )
            })?;
        if let Some(seen) = &self.seen {
            seen.record(index, seq)
                .map_err(|reason| format!("`{}`: {reason}", event.key))?;
        }
        // The previous event of the key must be the one just before: a
        // skip, a repeat or a step back (or two runs of the key at once)
        // shows up here.
        if self.next[index].swap(seq + 1, Ordering::AcqRel) != seq {
            self.out_of_order.fetch_add(1, Ordering::AcqRel);
        }
        self.checksum.fetch_add(event.seq, Ordering::AcqRel);
        self.first_ns.fetch_min(at, Ordering::AcqRel);
        self.last_ns.fetch_max(at, Ordering::AcqRel);
        self.handled.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

/// Which events were handled: bit `key * per_key + seq`.
#[derive(Debug)]
struct Seen {
    per_key: u32,
    bits: Box<[AtomicU64]>,
    events: u64,
    /// Events handled again.
    repeats: AtomicU64,
}

impl Seen {
    fn new(keys: usize, per_key: u32) -> Self {
        let events = keys as u64 * u64::from(per_key);
        Self {
            per_key,
            bits: (0..events.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            events,
            repeats: AtomicU64::new(0),
        }
    }

    /// Marks event `seq` of key number `key` handled.
    fn record(&self, key: usize, seq: u32) -> Result<(), String> {
        if seq >= self.per_key {
            return Err(format!(
                "event {seq} was not published ({} per key)",
                self.per_key
            ));
        }
        let bit = key as u64 * u64::from(self.per_key) + u64::from(seq);
        let (word, mask) = ((bit / 64) as usize, 1 << (bit % 64));
        if self.bits[word].fetch_or(mask, Ordering::AcqRel) & mask != 0 {
            self.repeats.fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Events not handled.
    fn missing(&self) -> u64 {
        let seen: u64 = self
            .bits
            .iter()
            .map(|word| u64::from(word.load(Ordering::Acquire).count_ones()))
            .sum();
        self.events - seen
    }
}

/// `k17` -> 17.
fn key_index(key: &str) -> Option<usize> {
    key.strip_prefix('k')?.parse().ok()
}

/// Microseconds since the Unix epoch.
pub fn unix_micros(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_micros()).unwrap_or(u64::MAX))
}

/// The benchmark's handler: [`BenchEvent`]s, partitioned by `key`.
#[derive(Debug, Clone)]
pub struct BenchHandler {
    tally: Arc<Tally>,
    /// What this handler (one instance's) handled, apart from the shared tally.
    handled: Arc<AtomicU64>,
}

impl BenchHandler {
    /// A handler counting into `tally`.
    pub fn new(tally: Arc<Tally>) -> Self {
        Self {
            tally,
            handled: Arc::new(AtomicU64::new(0)),
        }
    }
}

#[event_handler(part_of = BenchAggregate, sequential_by = "key", name = "OrdoBench")]
impl BenchHandler {
    #[handle]
    async fn on_bench_event(&self, event: &BenchEvent, ctx: &HandlerContext) -> HandlerResult {
        self.tally.record(event, ctx.metadata())?;
        self.handled.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

/// The configuration of a benchmark instance: Ordo's defaults, with
/// `reap_idle_ms` when given (as `domain.toml` would set it).
pub fn config(reap_idle_ms: Option<u64>) -> Result<Config> {
    let text = reap_idle_ms.map_or_else(String::new, |ms| {
        format!("[server.partitioning]\nreap_idle_ms = {ms}\n")
    });
    Config::from_toml_str(&text).context("invalid benchmark configuration")
}

/// How a benchmark instance is configured.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineOptions {
    /// The domain configuration.
    pub config: Config,
    /// Entries per fenced read (`RedisBrokerBuilder::read_batch`).
    pub read_batch: usize,
    /// Connections of the broker's command pool (`RedisBrokerBuilder::pool_size`).
    pub pool_size: usize,
    /// How long the broker's publishes drop a message id seen before
    /// (`RedisBrokerBuilder::publish_dedup_window`); `None`: Ordo's default.
    pub publish_dedup_window: Option<Duration>,
}

impl EngineOptions {
    /// `config` with the broker's default read batch (64) and pool size (8).
    pub fn new(config: Config) -> Self {
        Self {
            config,
            read_batch: 64,
            pool_size: 8,
            publish_dedup_window: None,
        }
    }
}

/// One engine instance: its broker and its domain.
#[derive(Debug, Clone)]
pub struct Engine {
    /// The instance's broker (its own connections, heartbeat and waker).
    pub broker: RedisBroker,
    /// The domain: [`BenchHandler`] on `broker`.
    pub domain: Domain,
    /// What this instance's handler handled.
    handled: Arc<AtomicU64>,
}

impl Engine {
    /// Connects an instance named `instance` to the run's Redis (with its
    /// TLS files), counting into `tally`. Not started.
    pub async fn connect(
        redis: &BenchRedis,
        instance: &str,
        options: &EngineOptions,
        tally: Arc<Tally>,
    ) -> Result<Self> {
        let config = options.config.clone();
        let handler = BenchHandler::new(tally);
        let handled = Arc::clone(&handler.handled);
        let mut builder = RedisBroker::builder(redis.url())
            .tls(redis.tls().files())
            .config(config.clone())
            .instance_id(instance)
            .read_batch(options.read_batch)
            .pool_size(options.pool_size);
        if let Some(window) = options.publish_dedup_window {
            builder = builder.publish_dedup_window(window);
        }
        let broker = builder
            .build()
            .await
            .with_context(|| format!("could not start the Redis broker of instance {instance}"))?;
        let domain = Domain::builder()
            .aggregate::<BenchAggregate>()
            .event_handler(handler)
            .broker(broker.clone())
            .config(config)
            .init()
            .context("the benchmark domain was refused")?;
        Ok(Self {
            broker,
            domain,
            handled,
        })
    }

    /// Messages this instance handled.
    pub fn handled(&self) -> u64 {
        self.handled.load(Ordering::Acquire)
    }

    /// Starts the outbox processor and the consumer.
    pub fn start(&self) -> RunningDomain {
        self.domain.start()
    }

    /// Runs the engine (its outbox processor and consumer) while `work`
    /// runs, then shuts it down and closes its connections: what `work`
    /// returned, once the engine stopped cleanly.
    pub async fn run<T>(&self, work: impl Future<Output = T>) -> Result<T> {
        let running = self.start();
        let outcome = work.await;
        running
            .shutdown()
            .await
            .context("the engine did not shut down cleanly")?;
        self.close().await?;
        Ok(outcome)
    }

    /// Closes the broker's connections (after its domain was shut down).
    pub async fn close(&self) -> Result<()> {
        self.broker
            .client()
            .quit()
            .await
            .context("could not close the broker's connections")
    }
}

/// How long filling a backlog took, and what publishing it cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Filled {
    /// Events committed and published.
    pub events: u64,
    /// Committing them to the (in-memory) outbox.
    pub commit: Duration,
    /// The outbox processor publishing them to the partition streams.
    pub publish: Duration,
    /// Redis's CPU time while publishing (`INFO cpu`), when measured.
    pub publish_redis_cpu: Option<Duration>,
    /// This process's CPU time while publishing, where it can be read.
    pub publish_process_cpu: Option<Duration>,
}

/// Commits events `seqs` (event `n` is `BenchEvent::nth(n, keys)`) in units
/// of work of `per_commit`, for a running engine's outbox processor to
/// publish.
pub async fn commit(domain: &Domain, seqs: Range<u64>, keys: usize, per_commit: usize) -> Result<()> {
    let mut seq = seqs.start;
    while seq < seqs.end {
        let end = (seq + per_commit.max(1) as u64).min(seqs.end);
        let mut uow = domain.unit_of_work();
        for n in seq..end {
            uow.raise(BenchEvent::nth(n, keys))?;
        }
        uow.commit().await.context("committing a unit of work failed")?;
        seq = end;
    }
    Ok(())
}

/// Commits events `seqs` (event `n` is `BenchEvent::nth(n, keys)`) in units
/// of work of `per_commit`, then has the outbox processor publish them all
/// to their partition streams, timing the two steps apart; with `admin`,
/// Redis's CPU time while publishing is measured too.
pub async fn fill(
    domain: &Domain,
    seqs: Range<u64>,
    keys: usize,
    per_commit: usize,
    admin: Option<&Client>,
) -> Result<Filled> {
    let events = seqs.end.saturating_sub(seqs.start);
    let started = Instant::now();
    commit(domain, seqs, keys, per_commit).await?;
    let commit = started.elapsed();
    let redis_before = match admin {
        Some(admin) => Some(redis_info::cpu(admin).await?),
        None => None,
    };
    let process_before = redis_info::process_cpu();
    let started = Instant::now();
    let report = domain
        .publish_pending()
        .await
        .context("the outbox processor failed")?;
    let publish = started.elapsed();
    let publish_process_cpu = redis_info::process_cpu()
        .zip(process_before)
        .map(|(now, then)| now.saturating_sub(then));
    let publish_redis_cpu = match (admin, redis_before) {
        (Some(admin), Some(before)) => Some(redis_info::cpu(admin).await?.saturating_sub(before)),
        _ => None,
    };
    ensure!(
        report.published as u64 == events && report.failed == 0 && report.abandoned == 0,
        "the outbox processor published {} of {events} events ({} failed, {} abandoned)",
        report.published,
        report.failed,
        report.abandoned
    );
    Ok(Filled {
        events,
        commit,
        publish,
        publish_redis_cpu,
        publish_process_cpu,
    })
}

/// Deletes every key matching one of `patterns` (SCAN + UNLINK); returns
/// how many were deleted. On a Redis Cluster every primary is scanned (a
/// `SCAN` sees one node's keys), and keys are unlinked one slot at a time (a
/// multi-key command must name one slot).
pub async fn delete_matching(client: &Client, patterns: &[&str]) -> Result<u64> {
    let deleted = on_every_primary(client, async |node: &Client| {
        let mut deleted = 0;
        for pattern in patterns {
            each_matching_page(node, pattern, async |keys| {
                let mut by_slot: BTreeMap<u16, Vec<String>> = BTreeMap::new();
                for key in keys {
                    by_slot
                        .entry(ClusterRouting::hash_key(key.as_bytes()))
                        .or_default()
                        .push(key);
                }
                for keys in by_slot.into_values() {
                    let unlinked: u64 = node
                        .custom(
                            CustomCommand::new_static("UNLINK", ClusterHash::FirstKey, false),
                            keys,
                        )
                        .await
                        .with_context(|| format!("UNLINK of keys matching {pattern} failed"))?;
                    deleted += unlinked;
                }
                Ok(())
            })
            .await?;
        }
        Ok(deleted)
    })
    .await?;
    Ok(deleted.into_iter().sum())
}

/// The bytes (`MEMORY USAGE`) of every key matching one of `patterns`,
/// and how many keys matched; on a Redis Cluster, over every primary.
pub async fn memory_of_matching(client: &Client, patterns: &[&str]) -> Result<(u64, u64)> {
    let per_node = on_every_primary(client, async |node: &Client| {
        let (mut bytes, mut count) = (0, 0);
        for pattern in patterns {
            each_matching_page(node, pattern, async |keys| {
                for key in keys {
                    let used: Option<u64> = node
                        .custom(
                            CustomCommand::new_static("MEMORY", ClusterHash::Random, false),
                            vec!["USAGE".to_owned(), key.clone()],
                        )
                        .await
                        .with_context(|| format!("MEMORY USAGE {key} failed"))?;
                    bytes += used.unwrap_or(0);
                    count += 1;
                }
                Ok(())
            })
            .await?;
        }
        Ok((bytes, count))
    })
    .await?;
    Ok(per_node
        .into_iter()
        .fold((0, 0), |(bytes, count), (b, c)| (bytes + b, count + c)))
}

/// `per_node` run on every primary: on a Redis Cluster each through a
/// connection of its own (a `SCAN` or `INFO` sees one node), on a single
/// Redis `client` itself.
pub(crate) async fn on_every_primary<T>(
    client: &Client,
    per_node: impl AsyncFn(&Client) -> Result<T>,
) -> Result<Vec<T>> {
    if !client.is_clustered() {
        return Ok(vec![per_node(client).await?]);
    }
    let mut results = Vec::new();
    for node in client
        .split_cluster()
        .context("cannot list the cluster's primaries")?
    {
        node.init().await.context("cannot connect to a cluster primary")?;
        let result = per_node(&node).await;
        let _ = node.quit().await;
        results.push(result?);
    }
    Ok(results)
}

/// `page` called with each page of the keys matching `pattern` (`SCAN`) on
/// the one node `client` talks to.
pub(crate) async fn each_matching_page(
    client: &Client,
    pattern: &str,
    mut page: impl AsyncFnMut(Vec<String>) -> Result<()>,
) -> Result<()> {
    let mut cursor = "0".to_owned();
    loop {
        let (next, keys) = scan_page(client, pattern, &cursor).await?;
        page(keys).await?;
        if next == "0" {
            return Ok(());
        }
        cursor = next;
    }
}

/// One page of `SCAN cursor MATCH pattern` on the one node `client` talks
/// to: the next cursor (`0` at the end) and the keys.
async fn scan_page(client: &Client, pattern: &str, cursor: &str) -> Result<(String, Vec<String>)> {
    let reply: Value = client
        .custom(
            CustomCommand::new_static("SCAN", ClusterHash::Random, false),
            vec![cursor, "MATCH", pattern, "COUNT", "1000"],
        )
        .await
        .with_context(|| format!("SCAN for {pattern} failed"))?;
    reply
        .convert()
        .with_context(|| format!("unexpected SCAN reply for {pattern}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_checks_order_and_times_the_runs() {
        let tally = Tally::new(NonZeroUsize::new(2).unwrap());
        assert_eq!(tally.first_handled(), None);
        // k0#0, k1#0, k0#1, then k1#0 again (a repeat).
        for seq in [0, 1, 2, 1] {
            tally.record(&BenchEvent::nth(seq, 2), &Metadata::new()).unwrap();
        }
        assert_eq!(tally.handled(), 4);
        assert_eq!(tally.checksum(), 1);
        assert_eq!(tally.out_of_order(), 1);
        assert!(tally.first_handled().unwrap() <= tally.last_handled().unwrap());
        assert!(tally.take_latencies().is_empty());
    }

    #[test]
    fn records_commit_to_handler_latency_from_the_metadata() {
        let tally = Tally::new(NonZeroUsize::new(1).unwrap());
        let committed = unix_micros(SystemTime::now()) - 3_000;
        let metadata = Metadata::from([(COMMITTED_AT_US.to_owned(), committed.to_string())]);
        tally.record(&BenchEvent::nth(0, 1), &metadata).unwrap();
        let mut latencies = tally.take_latencies();
        let summary = latencies.summary().unwrap();
        assert_eq!(summary.count, 1);
        assert!(summary.p50 >= Duration::from_millis(3), "{summary:?}");
    }

    #[test]
    fn the_group_is_the_handler_name() {
        use ordo::contract::handler::EventHandler as _;
        assert_eq!(BenchHandler::descriptor().name, GROUP);
    }

    #[test]
    fn records_each_event_of_each_key_to_tell_lost_from_repeated() {
        let (keys, per_key) = (NonZeroUsize::new(3).unwrap(), NonZeroU32::new(2).unwrap());
        let tally = Tally::with_events(keys, per_key);
        let handle = |key: usize, seq: u64| {
            let event = BenchEvent {
                key: crate::workload::key_name(key),
                seq,
            };
            tally.record(&event, &Metadata::new())
        };
        // k0 in order; k1 its second event twice, its first never; k2 untouched.
        for (key, seq) in [(0, 0), (1, 1), (0, 1), (1, 1)] {
            handle(key, seq).unwrap();
        }
        assert_eq!(tally.missing(), Some(3), "k1#0, k2#0, k2#1");
        assert_eq!(tally.repeats(), Some(1));
        assert_eq!(tally.out_of_order(), 2, "k1#1 first, then again");
        assert_eq!(tally.keys_short_of(2), 1, "k2 never got to its last event");
        assert!(handle(0, 2).is_err(), "k0 has two events, #2 was not published");
        assert!(handle(3, 0).is_err(), "there are three keys");
        assert_eq!(tally.handled(), 4);
        assert_eq!(Tally::new(keys).missing(), None);
    }

    #[test]
    fn a_million_keys_fit_in_a_few_megabytes() {
        let keys = NonZeroUsize::new(1_000_000).unwrap();
        let tally = Tally::with_events(keys, NonZeroU32::new(3).unwrap());
        let bits = tally.seen.as_ref().unwrap().bits.len() * 8;
        assert!(tally.next.len() * 4 + bits < 5_000_000);
        assert_eq!(tally.missing(), Some(3_000_000));
    }

    #[test]
    fn a_foreign_key_is_an_error() {
        let tally = Tally::new(NonZeroUsize::new(1).unwrap());
        assert!(tally.record(&BenchEvent::nth(1, 2), &Metadata::new()).is_err());
        assert_eq!(tally.handled(), 0);
    }

    #[test]
    fn the_config_keeps_the_defaults_but_the_reap_time() {
        let config = config(Some(86_400_000)).unwrap();
        let redis = ordo_redis::RedisSettings::from_config(&config).unwrap();
        assert_eq!(redis.reap_idle(), Some(Duration::from_secs(86_400)));
        assert_eq!(
            redis.lease_ttl(),
            ordo_redis::RedisSettings::default().lease_ttl()
        );
        assert_eq!(self::config(None).unwrap(), Config::default());
    }
}

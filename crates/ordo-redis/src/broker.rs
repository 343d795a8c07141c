//! The Redis broker: atomic partitioned publishing and the fenced partition
//! consumer, behind ordo-core's [`Broker`] contract.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fred::clients::Pool;
use fred::prelude::ClientLike;
use ordo_core::contract::broker::{
    Broker, BrokerError, Capabilities, Publication, PublishError, Refusal, RefusedExtent, Subscription,
};
use ordo_core::contract::config::{Config, HealthConfig};
use ordo_core::contract::handler::BoxFuture;
use ordo_core::contract::health::{HealthState, SubscriptionHealth};
use tokio_util::sync::CancellationToken;

use crate::consumer;
use crate::consumer::heartbeat::RenewalSignal;
use crate::consumer::shared::Settings;
use crate::error::{Error, Result};
use crate::net::connection;
use crate::net::secret::SecretUrl;
use crate::net::tls::TlsFiles;
use crate::ops::admin::PartitionAdmin;
use crate::ops::status::ClusterStatus;
use crate::owner::partition::Partitions;
use crate::owner::process::RedisProcessStore;
use crate::publish;
use crate::settings::RedisSettings;
use crate::store::partitioning;
use crate::store::scripts;

/// Entries read per fenced read by default.
const DEFAULT_READ_BATCH: usize = 64;
/// Connections of the command pool by default. Every busy partition waits on
/// one fenced round trip per message, so the pool bounds how many partitions
/// make progress at once: measured on 2 cores with 64 busy keys, 4
/// connections drain about 50,000 msgs/s, 8 about 62,000–68,000 (see
/// docs/PERFORMANCE.md).
const DEFAULT_POOL_SIZE: usize = 8;
/// How long a published message id is remembered per stream by default, so
/// a publish retried after a lost reply is not appended twice.
const DEFAULT_DEDUP_WINDOW: Duration = Duration::from_secs(60);
/// At most this many message ids are remembered per stream.
const DEDUP_CAP: usize = 10_000;
/// Bytes of messages one publish script call carries at most by default:
/// far under Redis's query-buffer limit (1 GB) and quick to send.
pub(crate) const DEFAULT_PUBLISH_CALL_BYTES: usize = 8 << 20;

/// The Redis broker.
///
/// ```no_run
/// # async fn example() -> Result<(), ordo_redis::Error> {
/// use ordo_redis::RedisBroker;
///
/// let broker = RedisBroker::builder("redis://127.0.0.1:6379")
///     .config(ordo_core::contract::config::Config::default())
///     .build()
///     .await?;
/// // Domain::builder().broker(broker.clone())...; broker.admin() for operators.
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisBroker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    url: SecretUrl,
    config: Config,
    settings: Settings,
    partitions: Partitions,
    dedup: publish::Dedup,
    limits: publish::Limits,
    /// The index buckets this process listed in their directories, and the
    /// index versions it still has to increment.
    index_notes: publish::IndexNotes,
    /// Whether a consumer runs: two consumers with one instance id would
    /// both take a lease this instance holds for their own.
    running: AtomicBool,
    /// Set by the heartbeat while renewing the held leases fails.
    renewals: RenewalSignal,
    /// The categories whose recorded partitioning this process checked.
    checked: partitioning::Checked,
    /// This instance's command replies.
    replies: Arc<crate::command::Replies>,
    /// The command partitions this instance's consumer holds, for the
    /// commands it sends to itself.
    locals: Arc<crate::consumer::local::LocalOwners>,
}

/// Configures a [`RedisBroker`].
#[derive(Debug, Clone)]
pub struct RedisBrokerBuilder {
    url: SecretUrl,
    config: Config,
    instance_id: Option<String>,
    pool_size: usize,
    read_batch: usize,
    dedup_window: Duration,
    publish_call_bytes: usize,
    allow_eviction: bool,
    tls: TlsFiles,
}

impl RedisBroker {
    /// A builder for a broker on the Redis at `url` (`redis://host:port/db`).
    pub fn builder(url: impl Into<String>) -> RedisBrokerBuilder {
        RedisBrokerBuilder {
            url: SecretUrl::new(url),
            config: Config::default(),
            instance_id: None,
            pool_size: DEFAULT_POOL_SIZE,
            read_batch: DEFAULT_READ_BATCH,
            dedup_window: DEFAULT_DEDUP_WINDOW,
            publish_call_bytes: DEFAULT_PUBLISH_CALL_BYTES,
            allow_eviction: false,
            tls: TlsFiles::default(),
        }
    }

    /// This instance's id (the first half of every lease value it holds).
    pub fn instance_id(&self) -> &str {
        self.inner.partitions.instance()
    }

    /// Publishes `publications` again on purpose: like [`Broker::publish`],
    /// but neither the message-id deduplication window nor an outbox
    /// relay's position (both of which exist to drop accidental
    /// re-publishes) may drop them. Each keeps its position scope, without
    /// its position (and its position's history). Every consumer group of
    /// the category handles them; a dead letter goes back with
    /// [`RedisBroker::replay`].
    pub async fn republish(&self, publications: &[Publication]) -> Result<(), PublishError> {
        let fresh: Vec<Publication> = publications
            .iter()
            .cloned()
            .map(|mut publication| {
                let metadata = &mut publication.envelope.metadata;
                metadata.remove(ordo_core::contract::broker::POSITION_METADATA);
                metadata.remove(ordo_core::contract::broker::POSITION_EPOCH_METADATA);
                publication
            })
            .collect();
        let dedup = publish::Dedup {
            window: Duration::ZERO,
            ..self.inner.dedup
        };
        self.check_partitioning(&fresh)
            .await
            .map_err(|error| PublishError {
                published: 0,
                source: Box::new(error),
            })?;
        self.publish_with(dedup, &fresh).await
    }

    /// Puts dead letters of consumer group `group` back (`ordo dlq
    /// replay`): [`RedisBroker::republish`]ed, marked as `group`'s replay
    /// ([`REPLAY_GROUP_METADATA`](ordo_core::contract::broker::REPLAY_GROUP_METADATA)),
    /// so only `group` handles them again; the category's other groups,
    /// which handled them the first time, skip them. Without a position,
    /// they pass a position fence once by message id
    /// (`ordo_postgres::fenced`).
    pub async fn replay(&self, group: &str, publications: &[Publication]) -> Result<(), PublishError> {
        let marked: Vec<Publication> = publications
            .iter()
            .cloned()
            .map(|mut publication| {
                publication.envelope.metadata.insert(
                    ordo_core::contract::broker::REPLAY_GROUP_METADATA.to_owned(),
                    group.to_owned(),
                );
                publication
            })
            .collect();
        self.republish(&marked).await
    }

    /// Publishes `publications`, each category checked against its
    /// partitioning recorded in Redis: the publications before the first
    /// one of a category partitioned otherwise are published (checked in
    /// turn), and that one is refused for its whole category
    /// ([`RefusedExtent::Category`]), so the caller goes on with the other
    /// categories.
    async fn publish_checked(
        &self,
        dedup: publish::Dedup,
        publications: &[Publication],
    ) -> Result<(), PublishError> {
        let error = match self.check_partitioning(publications).await {
            Ok(()) => return self.publish_with(dedup, publications).await,
            Err(error) => error,
        };
        let Error::PartitioningMismatch { category, .. } = &error else {
            return Err(PublishError {
                published: 0,
                source: Box::new(error),
            });
        };
        let index = publications
            .iter()
            .position(|p| p.key.is_some() && p.category == *category)
            .unwrap_or(0);
        if index > 0 {
            Box::pin(self.publish_checked(dedup, &publications[..index])).await?;
        }
        Err(PublishError {
            published: index,
            source: Box::new(Refusal::new(index, RefusedExtent::Category, error)),
        })
    }

    async fn publish_with(
        &self,
        dedup: publish::Dedup,
        publications: &[Publication],
    ) -> Result<(), PublishError> {
        publish::publish(
            self.client(),
            dedup,
            self.inner.limits,
            &self.inner.settings.backfill_suffix,
            &self.inner.settings.routing,
            &self.inner.index_notes,
            publications,
        )
        .await
    }

    /// Publishes a command to its command partition, dropped as a
    /// duplicate when its id was appended there within `window`.
    pub(crate) async fn publish_command(
        &self,
        publication: &Publication,
        window: Duration,
    ) -> Result<(), PublishError> {
        let publications = std::slice::from_ref(publication);
        self.check_partitioning(publications)
            .await
            .map_err(|error| PublishError {
                published: 0,
                source: Box::new(error),
            })?;
        let dedup = publish::Dedup {
            window,
            ..self.inner.dedup
        };
        self.publish_with(dedup, publications).await
    }

    /// The backfill lane's suffix.
    pub(crate) fn backfill_suffix(&self) -> &str {
        &self.inner.settings.backfill_suffix
    }

    /// Fails with [`Error::PartitioningMismatch`] when a partitioned
    /// category of `publications` is partitioned otherwise in Redis than in
    /// this broker's configuration.
    async fn check_partitioning(&self, publications: &[Publication]) -> Result<()> {
        let routing = &self.inner.settings.routing;
        let categories = publications
            .iter()
            .filter(|p| p.key.is_some())
            .map(|p| (p.category.as_str(), routing.partitions(&p.category)));
        self.inner.checked.ensure(self.client(), categories).await
    }

    /// How this broker routes each category's keys to partitions.
    pub fn routing(&self) -> &crate::store::keys::Routing {
        &self.inner.settings.routing
    }

    /// The command client (a connection pool).
    pub fn client(&self) -> &Pool {
        self.inner.partitions.client()
    }

    /// The operator API: halted partitions, inspect, skip, dead-letter, retry.
    pub fn admin(&self) -> PartitionAdmin {
        PartitionAdmin::new(self.client().clone(), &self.inner.settings.backfill_suffix)
            .with_routing(self.inner.settings.routing.clone())
    }

    /// Read-only queries of the cluster state (partitions, owners, lag,
    /// dead letters), knowing this broker's categories' partitioning.
    pub fn status(&self) -> ClusterStatus {
        ClusterStatus::new(self.client().clone(), &self.inner.settings.backfill_suffix)
            .with_routing(self.inner.settings.routing.clone())
    }

    /// A process-manager store on this broker's Redis, whose saves are
    /// fenced by the lease the message was handled under.
    pub fn process_store(&self) -> RedisProcessStore {
        RedisProcessStore::new(self.client().clone())
    }

    /// The fenced partition operations this instance's workers use.
    pub fn partitions(&self) -> &Partitions {
        &self.inner.partitions
    }
}

impl RedisBrokerBuilder {
    /// The domain configuration (`[server.partitioning]`, its Redis keys
    /// read as [`RedisSettings`], and `[server.priority_lanes]`); default:
    /// [`Config::default`]. [`build`](Self::build) rejects a configuration
    /// [`RedisSettings::from_config`] rejects ([`Error::DomainConfig`]). A domain
    /// on this broker uses it too (`Domain::builder().config(..)` is then
    /// unnecessary, and refused if different).
    #[must_use]
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// This instance's id; default: `<hostname>-<pid>-<6 random hex
    /// digits>` (the host and process it names, in `ordo status` and the
    /// logs; the random part tells apart two processes that share a host name
    /// and pid, such as successive containers whose process is pid 1). Must
    /// be unique among live instances, so only set it when something else
    /// guarantees that.
    #[must_use]
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// Connections in the command pool (default 8).
    #[must_use]
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// Entries read per fenced read (default 64). Messages are still handled
    /// one at a time, each acknowledged before the next (with a handler's
    /// `ack_window`, up to that many ahead, acknowledged half a window at a
    /// time; a read batch of twice the window then shares the read's round
    /// trip among more messages).
    #[must_use]
    pub fn read_batch(mut self, count: usize) -> Self {
        self.read_batch = count;
        self
    }

    /// How long each stream remembers what was appended to it (default
    /// 60 s; zero turns it off), so a publisher that publishes again after
    /// a lost reply (a timeout, a Redis restart) does not duplicate it. A
    /// publication with a producer sequence (the in-memory outbox's rows,
    /// see `ordo_core::contract::broker::ProducerSequence`) is skipped when
    /// its producer already appended that sequence or a later one to the
    /// stream: one hash field per producer and stream, kept while the
    /// producer publishes to the stream and for the window after. Any other
    /// (a command run's events, a direct publish) is skipped when the
    /// stream got its message id within the window: one sorted-set member
    /// per such message (at most 10,000 per stream). Publications with an
    /// outbox position (the PostgreSQL relay's) are deduplicated by it.
    #[must_use]
    pub fn publish_dedup_window(mut self, window: Duration) -> Self {
        self.dedup_window = window;
        self
    }

    /// Bytes of messages one publish script call carries at most (default
    /// 8 MiB; at least 1): a batch is sent in calls of at most 128
    /// publications and this many bytes, a bigger message in a call of its
    /// own. Keeps each call far under Redis's query-buffer limit (1 GB by
    /// default) and its client timeout.
    #[must_use]
    pub fn publish_call_bytes(mut self, bytes: usize) -> Self {
        self.publish_call_bytes = bytes.max(1);
        self
    }

    /// Runs even on a Redis whose `maxmemory-policy` may evict keys (default:
    /// refused). An evicted lease, halt record or pending stream entry breaks
    /// the ordering guarantee silently; only opt out where something else
    /// guarantees Ordo's keys are never evicted.
    #[must_use]
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    /// The TLS files of a `rediss://` URL: the CA to trust instead of the
    /// system's, and a client certificate for mutual TLS. Setting any for a
    /// URL without TLS is an error at [`build`](Self::build).
    #[must_use]
    pub fn tls(mut self, tls: TlsFiles) -> Self {
        self.tls = tls;
        self
    }

    /// Validates the settings and connects.
    pub async fn build(self) -> Result<RedisBroker> {
        let settings = self.settings()?;
        let instance = match self.instance_id {
            Some(id) if id.is_empty() => {
                return Err(Error::Config {
                    key: "instance_id",
                    reason: "must not be empty".to_owned(),
                });
            }
            Some(id) if id.contains(['{', '}']) => {
                return Err(Error::Config {
                    key: "instance_id",
                    reason: format!(
                        "{id:?} contains a brace (it names the instance's reply list, a hash tag)"
                    ),
                });
            }
            Some(id) => id,
            None => default_instance_id(),
        };
        if self.pool_size == 0 {
            return Err(Error::Config {
                key: "pool_size",
                reason: "must be at least 1".to_owned(),
            });
        }
        let pool = connection::builder(self.url.expose(), &settings.tls, settings.lease_ttl / 3, true)?
            .build_pool(self.pool_size)?;
        pool.init().await.map_err(|source| Error::Connect {
            url: self.url.to_string(),
            source,
        })?;
        if !self.allow_eviction {
            connection::check_no_eviction(&pool).await?;
        }
        scripts::ensure_loaded(pool.next()).await?;
        tracing::info!(
            event = ordo_core::contract::log_events::REDIS_CONNECTED,
            url = %self.url,
            instance = %instance,
            pool_size = self.pool_size,
            "connected to Redis"
        );
        let replies = Arc::new(crate::command::Replies::new(
            &instance,
            self.url.clone(),
            settings.tls.clone(),
        ));
        let partitions = Partitions::new(pool, instance, settings.lease_ttl);
        Ok(RedisBroker {
            inner: Arc::new(Inner {
                url: self.url,
                config: self.config,
                settings,
                partitions,
                dedup: publish::Dedup {
                    window: self.dedup_window,
                    cap: DEDUP_CAP,
                },
                limits: publish::Limits {
                    call_bytes: self.publish_call_bytes,
                },
                index_notes: publish::IndexNotes::default(),
                running: AtomicBool::new(false),
                renewals: RenewalSignal::default(),
                checked: partitioning::Checked::default(),
                replies,
                locals: Arc::default(),
            }),
        })
    }

    fn settings(&self) -> Result<Settings> {
        let partitioning = self.config.partitioning();
        let redis = RedisSettings::from_config(&self.config)?;
        if self.read_batch == 0 {
            return Err(Error::Config {
                key: "read_batch",
                reason: "must be at least 1".to_owned(),
            });
        }
        Ok(Settings {
            lease_ttl: redis.lease_ttl(),
            heartbeat_interval: redis.heartbeat_interval(),
            poll_interval: partitioning.poll_interval(),
            reap_idle: redis.reap_idle(),
            discovery_interval: redis.discovery_interval(),
            max_owned: redis.max_owned_partitions(),
            recheck_interval: redis.recheck_interval(),
            retry: partitioning.clone(),
            backoff: partitioning.backoff(),
            backfill_suffix: self.config.priority_lanes().backfill_suffix().to_owned(),
            routing: crate::store::keys::Routing::new(&self.config),
            read_batch: self.read_batch,
            wake_block: partitioning.poll_interval().max(Duration::from_millis(1)),
            max_concurrency: partitioning.max_concurrency(),
            tls: self.tls.clone(),
            command_dedup_window: self.config.commands().dedup_window(),
        })
    }
}

/// `<hostname>-<pid>-<6 random hex digits>`: the host name from the kernel
/// (`/proc/sys/kernel/hostname`), else `HOSTNAME`, else `host`, kept to the
/// characters of a host name.
fn default_instance_id() -> String {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| {
            name.trim()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
                .collect::<String>()
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "host".to_owned());
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{hostname}-{}-{}", std::process::id(), &random[..6])
}

impl Broker for RedisBroker {
    fn name(&self) -> &str {
        "redis"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::STREAM_PARTITIONING.with_hashed_partitions()
    }

    fn publish<'a>(&'a self, publications: &'a [Publication]) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(async move { self.publish_checked(self.inner.dedup, publications).await })
    }

    /// The configuration the broker was built with: the domain's default.
    fn config(&self) -> Option<Config> {
        Some(self.inner.config.clone())
    }

    /// The lease, heartbeat, reap and discovery keys ([`RedisSettings`]).
    fn partitioning_keys(&self) -> &'static [&'static str] {
        RedisSettings::keys()
    }

    /// The broker's [`RedisProcessStore`](crate::RedisProcessStore): process
    /// managers move between instances with their leases, so their state
    /// must live in Redis and be saved under the lease fence.
    fn command_router(&self) -> Option<Arc<dyn ordo_core::contract::command::CommandRouter>> {
        Some(Arc::new(crate::command::RedisCommands::new(
            self.clone(),
            Arc::clone(&self.inner.replies),
            Arc::clone(&self.inner.locals),
        )))
    }

    fn process_store(&self) -> Option<Arc<dyn ordo_core::contract::process::ProcessStore>> {
        Some(Arc::new(RedisBroker::process_store(self)))
    }

    /// Each subscription's group judged by [`crate::ops::health::group_health`]
    /// (what `ordo status --check` reports too), made `unknown` when Redis
    /// does not answer or this instance's lease renewals are failing.
    fn health<'a>(
        &'a self,
        subscriptions: &'a [Subscription],
        thresholds: &'a HealthConfig,
    ) -> BoxFuture<'a, Vec<SubscriptionHealth>> {
        Box::pin(async move {
            let status = ClusterStatus::new(
                self.inner.partitions.client().clone(),
                self.inner.config.priority_lanes().backfill_suffix(),
            );
            let renewals = self.inner.renewals.failing();
            let mut report = Vec::with_capacity(subscriptions.len());
            for subscription in subscriptions {
                let categories: Vec<String> =
                    subscription.categories().into_iter().map(str::to_owned).collect();
                let mut health = match crate::ops::health::group_health(
                    &status,
                    subscription.name(),
                    &categories,
                    thresholds,
                )
                .await
                {
                    Ok(health) => health,
                    Err(error) => crate::ops::health::redis_unreachable(subscription.name(), &error),
                };
                if let Some(error) = &renewals {
                    health.degrade(
                        HealthState::Unknown,
                        format!("this instance's lease renewals are failing: {error}"),
                    );
                }
                report.push(health);
            }
            report
        })
    }

    fn run(
        &self,
        subscriptions: Arc<[Subscription]>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), BrokerError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            if inner.running.swap(true, Ordering::SeqCst) {
                return Err(Box::new(Error::AlreadyRunning {
                    instance: inner.partitions.instance().to_owned(),
                }) as BrokerError);
            }
            let partitioned = subscriptions
                .iter()
                .filter(|s| s.partitioned())
                .flat_map(|s| s.categories())
                .map(|category| (category, inner.settings.routing.partitions(category)));
            if let Err(error) = inner.checked.ensure(inner.partitions.client(), partitioned).await {
                inner.running.store(false, Ordering::SeqCst);
                return Err(Box::new(error) as BrokerError);
            }
            let stopped = consumer::run(
                inner.url.clone(),
                inner.settings.clone(),
                inner.partitions.clone(),
                subscriptions,
                shutdown,
                inner.renewals.clone(),
                Arc::clone(&inner.locals),
            )
            .await;
            let result = match stopped {
                Ok(consumer::Stopped { result, lingering }) => {
                    match lingering {
                        // This instance still holds leases for handler runs
                        // that outlived the consumer: a new consumer of it
                        // would take them back as its own, so it is refused
                        // until the heartbeat let them go. The wait also
                        // holds the runtime's shutdown until then, so the
                        // leases are released, not left to expire.
                        Some(heartbeat) => {
                            let inner = inner.clone();
                            drop(tokio::task::spawn_blocking(move || {
                                let _ = heartbeat.join();
                                inner.running.store(false, Ordering::SeqCst);
                            }));
                        }
                        None => inner.running.store(false, Ordering::SeqCst),
                    }
                    result
                }
                Err(error) => {
                    inner.running.store(false, Ordering::SeqCst);
                    Err(error)
                }
            };
            result.map_err(|error| Box::new(error) as BrokerError)
        })
    }
}

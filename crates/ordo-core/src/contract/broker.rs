//! The broker contract: how published messages leave the outbox and how
//! brokers hand them to the registered handlers.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, OnceLock};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::contract::backoff::Backoff;
use crate::contract::command::CommandRouter;
use crate::contract::config::{Config, HandlerConfig, HealthConfig, PartitioningConfig};
use crate::contract::handler::{BoxFuture, DynHandler, HandlerDescriptor, HandlerKind};
use crate::contract::health::SubscriptionHealth;
use crate::contract::key::Lane;
use crate::contract::message::Envelope;
use crate::contract::policy::SequencingPolicy;
use crate::contract::process::ProcessStore;
use crate::contract::retry::{Breaker, RetryPolicy};

/// What a broker can do, checked by `Domain::init()`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// The broker routes each partition key to its own stream and runs one
    /// owner per partition across instances (`sequential_by` is enforced).
    pub stream_partitioning: bool,
    /// The broker runs handlers in this process in submission order, so a
    /// `sequential_by` declaration is a no-op there (the inline broker).
    pub ordered_in_process: bool,
    /// The broker can run a category with a fixed number of hashed
    /// partitions (`[categories.NAME] partitions = N`), keeping each key's
    /// order inside a partition.
    pub hashed_partitions: bool,
}

impl Capabilities {
    /// No capability at all.
    pub const NONE: Self = Self {
        stream_partitioning: false,
        ordered_in_process: false,
        hashed_partitions: false,
    };

    /// Stream partitioning (the Redis broker).
    pub const STREAM_PARTITIONING: Self = Self {
        stream_partitioning: true,
        ordered_in_process: false,
        hashed_partitions: false,
    };

    /// In-process ordering (the inline broker).
    pub const ORDERED_IN_PROCESS: Self = Self {
        stream_partitioning: false,
        ordered_in_process: true,
        hashed_partitions: false,
    };

    /// `self`, able to run hashed partitions too.
    #[must_use]
    pub const fn with_hashed_partitions(mut self) -> Self {
        self.hashed_partitions = true;
        self
    }
}

/// One outbox row on its way to a broker: where it goes, as (category, key,
/// lane), and the message. The broker names the stream (or whatever its
/// transport calls it) from those; nothing here knows a broker's naming.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    /// The stream category (the envelope's).
    pub category: String,
    /// The validated partition key when the row goes to its key's partition
    /// (the broker advertises stream partitioning); `None` when it goes to
    /// the category's base stream (the key, if any, still on the envelope).
    pub key: Option<String>,
    /// The lane: backfill rows of a partitioned category use the backfill
    /// lane; base-stream rows are always on the primary lane.
    pub lane: Lane,
    /// The message, with its validated `partition_key`.
    pub envelope: Envelope,
    /// Who publishes it and its place in that producer's sequence, when
    /// its source numbers what it publishes (the in-memory outbox): see
    /// [`ProducerSequence`]. `None`: deduplicated by message id, or by
    /// position ([`POSITION_SCOPE_METADATA`]).
    pub producer: Option<ProducerSequence>,
}

/// A publication's producer and sequence, for deduplication as Kafka's
/// idempotent producer does it: a broker that supports it keeps, per
/// stream, the last sequence appended of each producer, and drops a
/// publication whose sequence is at or below it (a resend after a lost
/// reply, a late request). State is one number per producer and stream,
/// however many messages.
///
/// What the producer promises (the in-memory outbox processor keeps it:
/// the sequence is the outbox row id): a producer id is never used by two
/// sources; sequences grow with commit order; and a publication to a stream
/// is only sent when every earlier publication of the producer to that
/// stream is known to be in it, is in a call not answered yet, or is sent
/// before it in the same call, so that a sequence at or below the last one
/// appended is always one that was appended. A publication sent while the
/// one before it to the same stream is in a call not answered yet names it
/// ([`ProducerSequence::previous`]): the broker appends it only after that
/// one, and refuses it when that one is not in the stream (its call failed,
/// or has not landed), so pipelined calls never let a later publication
/// pass an earlier one. Checked by `ordo-model publish`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProducerSequence {
    /// The producer's id: new with every outbox (every process start).
    pub producer: Arc<str>,
    /// The publication's sequence in the producer's commit order (from 1).
    pub sequence: u64,
    /// The sequence of the producer's publication before it to the same
    /// destination when that one was sent in a call not answered yet (0:
    /// none). Within one [`Broker::publish`] batch the broker chains the
    /// batch's own publications itself: a publication's previous one is
    /// the later of this and the batch's last one to the same destination.
    pub previous: u64,
}

impl Publication {
    /// `envelope` published to its key's partition, on `lane`.
    pub fn to_partition(key: impl Into<String>, lane: Lane, envelope: Envelope) -> Self {
        Self {
            category: envelope.category.clone(),
            key: Some(key.into()),
            lane,
            envelope,
            producer: None,
        }
    }

    /// `envelope` published to its category's base stream.
    pub fn to_base(envelope: Envelope) -> Self {
        Self {
            category: envelope.category.clone(),
            key: None,
            lane: Lane::Primary,
            envelope,
            producer: None,
        }
    }

    /// `self`, deduplicated as publication `sequence` of `producer` (see
    /// [`ProducerSequence`]).
    #[must_use]
    pub fn with_producer(mut self, producer: Arc<str>, sequence: u64) -> Self {
        self.producer = Some(ProducerSequence {
            producer,
            sequence,
            previous: 0,
        });
        self
    }

    /// `self` (published with a producer), sent while the producer's
    /// publication `previous` to the same destination is in a call not
    /// answered yet: see [`ProducerSequence::previous`]. No effect without
    /// a producer.
    #[must_use]
    pub fn after(mut self, previous: u64) -> Self {
        if let Some(producer) = &mut self.producer {
            producer.previous = previous;
        }
        self
    }
}

/// Metadata entry naming a publication's *position scope*: an ordered
/// source (the PostgreSQL outbox) numbers the messages of each scope (one
/// partition lane) 1, 2, 3... without gaps in commit order.
///
/// A broker that supports it publishes a message carrying a scope and a
/// [`POSITION_METADATA`] only when its position is above the last one it
/// published for that scope, atomically with the publish; otherwise it
/// drops it as already published. That makes re-publishing after a relay
/// crash (published, not yet marked) a no-op, and lets a stale relay run
/// into a newer one without reordering or duplicating a key's messages.
pub const POSITION_SCOPE_METADATA: &str = "ordo.position.scope";

/// Metadata entry with a publication's position in its scope (see
/// [`POSITION_SCOPE_METADATA`]), a decimal integer from 1.
pub const POSITION_METADATA: &str = "ordo.position";

/// Metadata entry naming the history a publication's position belongs to:
/// the source's identity (the PostgreSQL outbox's, which changes when its
/// database is restored, recovered to a point in time, failed over or
/// re-created). A broker records it with each scope's last position; a
/// position it already holds *from another history* is not a duplicate but
/// a conflict: the publication is refused ([`Refusal`]), never dropped, so
/// the source's rows stay pending instead of being taken for published.
pub const POSITION_EPOCH_METADATA: &str = "ordo.position.epoch";

/// Metadata entry of a dead letter put back by an operator (`ordo dlq
/// replay`): the consumer group that dead-lettered it. Only that group
/// handles it again ([`Subscription::handles`]); the category's other
/// groups, which handled it the first time, skip it. Such a message
/// carries its position scope but no position: a position fence applies it
/// once by message id (`ordo_postgres::fenced`).
pub const REPLAY_GROUP_METADATA: &str = "ordo.replay.group";

/// How far a broker's refusal of one publication reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusedExtent {
    /// Its position scope (its key's lane): the scope's later
    /// publications must wait behind it, the others go on.
    Scope,
    /// Its whole category (a category the broker partitions otherwise than
    /// the publisher's configuration says): no publication of the category
    /// can go, the other categories' go on.
    Category,
}

/// A broker's refusal of one publication, for a reason of that
/// publication's own (its scope's or its category's), not a failure of
/// the broker: the [`PublishError`] carrying it as its source lets the
/// caller go on with the publications of other scopes or categories.
#[derive(Debug, thiserror::Error)]
#[error("publication {index} of the batch was refused")]
pub struct Refusal {
    /// The refused publication's place in the batch passed to
    /// [`Broker::publish`]. Every publication before it that is not
    /// counted in [`PublishError::published`] may or may not be written
    /// (see there); none after it is written but on other nodes.
    pub index: usize,
    /// What else waits behind it.
    pub extent: RefusedExtent,
    /// For a position already held by the broker from another history
    /// ([`POSITION_EPOCH_METADATA`]): the last position the broker holds
    /// for the scope, which the source may continue from.
    pub broker_position: Option<u64>,
    /// Why.
    #[source]
    pub reason: BrokerError,
}

impl Refusal {
    /// A refusal of publication `index` reaching `extent`, for `reason`.
    pub fn new(index: usize, extent: RefusedExtent, reason: impl Into<BrokerError>) -> Self {
        Self {
            index,
            extent,
            broker_position: None,
            reason: reason.into(),
        }
    }

    /// Records the broker's last position of the refused publication's scope.
    #[must_use]
    pub fn with_broker_position(mut self, position: u64) -> Self {
        self.broker_position = Some(position);
        self
    }
}

/// A publish that stopped part-way.
#[derive(Debug, thiserror::Error)]
#[error("broker publish failed after {published} of the batch's publications")]
pub struct PublishError {
    /// How many publications, from the start of the batch, were published.
    /// Conservative: some after them may be published too (a broker that
    /// publishes to several nodes at once, a reply lost with its
    /// connection); a caller publishes the rest again, and the broker drops
    /// what it already has (by outbox position, or message id within its
    /// deduplication window).
    pub published: usize,
    /// Why the next one was not.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl PublishError {
    /// The refusal this failure is, when the broker refused one publication
    /// for a reason of its own scope or category (the caller goes on with
    /// the others) rather than failing.
    pub fn refusal(&self) -> Option<&Refusal> {
        self.source.downcast_ref::<Refusal>()
    }
}

/// A broker failure outside publishing (start-up, connection).
pub type BrokerError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A message transport.
///
/// `Any` lets the runtime recognise its own in-process broker behind a
/// `dyn Broker`; every `'static` type is `Any`.
pub trait Broker: Any + Send + Sync + fmt::Debug {
    /// A short name for messages and logs (`inline`, `redis`).
    fn name(&self) -> &str;

    /// What this broker can do.
    fn capabilities(&self) -> Capabilities;

    /// Publishes `publications` in order; on failure reports how many, from the
    /// start, were published.
    fn publish<'a>(&'a self, publications: &'a [Publication]) -> BoxFuture<'a, Result<(), PublishError>>;

    /// Consumes messages for `subscriptions` until `shutdown` is cancelled.
    /// Returns when every worker has stopped.
    fn run(
        &self,
        subscriptions: Arc<[Subscription]>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), BrokerError>>;

    /// The process store that process managers must use on this broker, when
    /// it moves their ownership between instances (the Redis broker's store,
    /// which every instance reads and which fences saves). `Domain::init()`
    /// uses it unless another store is set; `None` (the default) keeps the
    /// in-memory store.
    fn process_store(&self) -> Option<Arc<dyn ProcessStore>> {
        None
    }

    /// The broker's routing of commands to the owner of their key across
    /// instances (see [`crate::contract::command`]), when it has one. With
    /// one, `Domain::dispatch` and `Domain::send` send each command with a
    /// sequence to its key's owner, and the broker's consumer runs the
    /// command handlers ([`Broker::run`] gets their subscriptions, on the
    /// command stream categories). `None` (the default): commands run in
    /// the sending process, sequenced there.
    fn command_router(&self) -> Option<Arc<dyn CommandRouter>> {
        None
    }

    /// The configuration the broker was built with, when it has one (the
    /// Redis broker's). `Domain::init()` uses it when the domain is given no
    /// configuration, and refuses a different one: the broker's leases and
    /// the domain's outbox and key rules must agree.
    fn config(&self) -> Option<Config> {
        None
    }

    /// The keys of `[server.partitioning]` this broker reads beyond
    /// ordo-core's own (the Redis broker's timings): the fields of the
    /// serde struct it reads them into with [`Config::broker_section`]
    /// ([`struct_fields`](crate::contract::config::struct_fields)). `Domain::init()` refuses a
    /// configuration with a key of that table that neither ordo-core nor
    /// the broker reads ([`UsageProblem::UnknownConfigKey`](crate::UsageProblem::UnknownConfigKey)).
    /// None by default.
    fn partitioning_keys(&self) -> &'static [&'static str] {
        &[]
    }

    /// The health of each of `subscriptions` on this broker, judged with
    /// `thresholds` (see [`crate::contract::health`]), in the order given. The
    /// default reports every subscription `unknown`: a broker that cannot
    /// tell must not claim `ok`.
    fn health<'a>(
        &'a self,
        subscriptions: &'a [Subscription],
        thresholds: &'a HealthConfig,
    ) -> BoxFuture<'a, Vec<SubscriptionHealth>> {
        let _ = thresholds;
        let name = self.name().to_owned();
        Box::pin(async move {
            subscriptions
                .iter()
                .map(|s| SubscriptionHealth::unknown(s.name(), format!("broker `{name}` reports no health")))
                .collect()
        })
    }
}

impl<B: Broker + ?Sized> Broker for Arc<B> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }

    fn publish<'a>(&'a self, publications: &'a [Publication]) -> BoxFuture<'a, Result<(), PublishError>> {
        (**self).publish(publications)
    }

    fn run(
        &self,
        subscriptions: Arc<[Subscription]>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), BrokerError>> {
        (**self).run(subscriptions, shutdown)
    }

    fn process_store(&self) -> Option<Arc<dyn ProcessStore>> {
        (**self).process_store()
    }

    fn command_router(&self) -> Option<Arc<dyn CommandRouter>> {
        (**self).command_router()
    }

    fn config(&self) -> Option<Config> {
        (**self).config()
    }

    fn partitioning_keys(&self) -> &'static [&'static str] {
        (**self).partitioning_keys()
    }

    fn health<'a>(
        &'a self,
        subscriptions: &'a [Subscription],
        thresholds: &'a HealthConfig,
    ) -> BoxFuture<'a, Vec<SubscriptionHealth>> {
        (**self).health(subscriptions, thresholds)
    }
}

/// A registered handler as a broker sees it: what it consumes and how to call it.
#[derive(Clone)]
pub struct Subscription {
    /// The handler's description (name, kind, handled types, key fields).
    pub descriptor: Arc<HandlerDescriptor>,
    /// The policy that sequences this handler's messages in process: the
    /// registration override, else the impl's `#[sequencing_policy]`, else the
    /// `sequential_by` key, else the kind's default. A method's own
    /// `#[sequencing_policy]` still wins (see [`Subscription::policy_for`]).
    pub policy: Arc<dyn SequencingPolicy>,
    /// Whether a registration-time policy overrides the method attributes.
    pub policy_overridden: bool,
    /// How to call the handler.
    pub handler: Arc<dyn DynHandler>,
    /// The handler's own retries, backoff and concurrency (`[handlers.NAME]`
    /// and `DomainBuilder::handler_settings`); the default overrides nothing.
    pub settings: HandlerSettings,
}

/// A subscription's own settings as brokers apply them: each override, else
/// the broker's `[server.partitioning]` value, and this handler's own bound
/// on concurrent runs.
#[derive(Debug, Clone, Default)]
pub struct HandlerSettings {
    config: HandlerConfig,
    /// Shared by every clone, so the bound holds across the broker's tasks.
    limit: Option<Arc<Semaphore>>,
    /// The handler's circuit breaker in this process, made by the first
    /// [`Subscription::retry_policy`] (shared by every clone).
    breaker: Arc<OnceLock<Arc<Breaker>>>,
}

impl HandlerSettings {
    /// The settings of `config`.
    pub fn new(config: HandlerConfig) -> Self {
        let limit = config.max_concurrency().map(|n| Arc::new(Semaphore::new(n)));
        Self {
            config,
            limit,
            breaker: Arc::default(),
        }
    }

    /// The overrides.
    pub fn config(&self) -> &HandlerConfig {
        &self.config
    }

    /// The handler's `max_retries`, else `default` (see
    /// [the one definition](crate::contract::config#retries-what-max_retries--n-means)).
    pub fn max_retries(&self, default: u32) -> u32 {
        self.config.max_retries().unwrap_or(default)
    }

    /// How many attempts a message gets: `max_retries + 1`.
    pub fn attempts(&self, default_max_retries: u32) -> u32 {
        self.max_retries(default_max_retries).saturating_add(1)
    }

    /// The handler's backoff, else `default`.
    pub fn backoff(&self, default: Backoff) -> Backoff {
        self.config.backoff().unwrap_or(default)
    }

    /// Waits for one of the handler's own run slots (hold it for the run);
    /// `None` when the handler has no bound of its own.
    pub async fn acquire(&self) -> Option<OwnedSemaphorePermit> {
        let limit = self.limit.clone()?;
        // The semaphore is never closed.
        limit.acquire_owned().await.ok()
    }
}

impl Subscription {
    /// The handler's name (also its consumer-group name).
    pub fn name(&self) -> &'static str {
        self.descriptor.name
    }

    /// The handler's retry policy: its own settings over `defaults` (the
    /// broker's `[server.partitioning]`), with its circuit breaker in this
    /// process (made at the first call, shared by every later one).
    pub fn retry_policy(&self, defaults: &PartitioningConfig) -> RetryPolicy {
        let config = self.settings.config();
        let backoff = self.settings.backoff(defaults.backoff());
        let breaker = self.settings.breaker.get_or_init(|| {
            let keys = config.pause_min_keys().unwrap_or(defaults.pause_min_keys());
            Arc::new(Breaker::new(self.name(), keys, backoff))
        });
        RetryPolicy::new(defaults, Arc::clone(breaker))
            .with_max_retries(self.settings.max_retries(defaults.max_retries()))
            .with_backoff(backoff)
            .with_max_transient(config.max_transient().unwrap_or(defaults.max_transient()))
            .with_timeout(
                config.timeout().unwrap_or(defaults.handler_timeout()),
                config
                    .timeout_is_transient()
                    .unwrap_or(defaults.timeout_is_transient()),
            )
    }

    /// The handler's pause in this process, when its circuit breaker is
    /// open (`None` before any message was delivered).
    pub fn paused(&self) -> Option<crate::contract::retry::PauseStatus> {
        self.settings.breaker.get().and_then(|breaker| breaker.status())
    }

    /// Which macro produced the handler.
    pub fn kind(&self) -> HandlerKind {
        self.descriptor.kind
    }

    /// Whether the handler partitions its categories by key.
    pub fn partitioned(&self) -> bool {
        self.descriptor.partitioned
    }

    /// The distinct categories the handler consumes.
    pub fn categories(&self) -> Vec<&'static str> {
        self.descriptor.categories()
    }

    /// Whether the handler handles the message `envelope` holds: same
    /// category and type name, and, for a replayed dead letter
    /// ([`REPLAY_GROUP_METADATA`]), this handler's group is the one that
    /// dead-lettered it.
    pub fn handles(&self, envelope: &Envelope) -> bool {
        self.descriptor.handled_envelope(envelope).is_some()
            && envelope
                .metadata
                .get(REPLAY_GROUP_METADATA)
                .is_none_or(|group| group == self.name())
    }

    /// The policy that sequences the message type `type_name` of `category`
    /// for this handler.
    pub fn policy_for(&self, category: &str, type_name: &str) -> &dyn SequencingPolicy {
        if !self.policy_overridden
            && let Some(policy) = self
                .descriptor
                .handled(category, type_name)
                .and_then(|h| h.policy.as_deref())
        {
            return policy;
        }
        &*self.policy
    }
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("name", &self.descriptor.name)
            .field("kind", &self.descriptor.kind)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

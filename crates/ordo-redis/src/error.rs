//! The errors of the Redis broker.

/// What went wrong talking to Redis or with a partition.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A Redis command or script failed (connection lost, server error).
    #[error("redis command failed")]
    Redis(#[source] fred::error::Error),

    /// Redis could not be reached, or could not serve the command for now
    /// (a lost connection, a timeout, a server loading its data or failing
    /// over): what [`RedisFence`](crate::RedisFence) commits and the
    /// process store report instead of [`Error::Redis`]. The source carries
    /// the [`Transient`](ordo_core::contract::retry::Transient) marker, so a handler
    /// that returns it is retried without using up an attempt.
    #[error("Redis is unavailable for now")]
    Unavailable(#[source] ordo_core::contract::retry::Transient),

    /// The first connection to Redis failed (unreachable, refused, bad
    /// credentials).
    #[error("cannot connect to Redis at {url}")]
    Connect {
        /// The URL tried, with any password replaced by `***`.
        url: String,
        /// The client's error.
        #[source]
        source: fred::error::Error,
    },

    /// The lease this operation was fenced by is no longer held at the
    /// expected value: another instance owns the partition now (or it
    /// expired). The caller must stop touching the partition.
    #[error("fenced: lease `{lease}` is no longer held as `{expected}` (now {})", holder_text(.holder))]
    Fenced {
        /// The lease key.
        lease: String,
        /// The value the caller expected (`{instance}:{token}`).
        expected: String,
        /// The current holder, if any.
        holder: Option<String>,
    },

    /// A command of a handler attempt the partition has moved past: the
    /// holder of the lease closed that attempt (acknowledged its message,
    /// started another attempt, or halted), so the command reached Redis
    /// late (delayed on its connection past the client's timeout, or resent
    /// after a reconnect). Nothing was applied: applying it now would land
    /// it after the effects of later attempts.
    #[error("stale: attempt {attempt} under lease `{lease}` was closed before this command arrived")]
    Stale {
        /// The lease key.
        lease: String,
        /// The attempt the command belongs to.
        attempt: u64,
    },

    /// An operator action on a partition that is not halted.
    #[error("partition `{partition}` is not halted for group `{group}`")]
    NotHalted {
        /// The consumer group (handler name).
        group: String,
        /// The partition, as `category:key`.
        partition: String,
    },

    /// An operator action expected the partition to be halted on one head
    /// but it is halted on another (someone acted meanwhile, and the
    /// partition halted again on a later message). Nothing was changed.
    #[error(
        "the halted head of `{partition}` for group `{group}` is {actual}, not the expected {expected}: \
         it changed since it was inspected"
    )]
    HeadChanged {
        /// The consumer group (handler name).
        group: String,
        /// The partition, as `category:key`.
        partition: String,
        /// The head id the action was for.
        expected: String,
        /// The head id the partition is halted on now.
        actual: String,
    },

    /// The category is partitioned one way in Redis and another in this
    /// process's configuration (`[categories.NAME] partitions`): its
    /// messages would go to other partitions than the ones holding its
    /// keys' earlier messages. Nothing was published or consumed.
    #[error(
        "category `{category}` is partitioned `{recorded}` in Redis but `{configured}` in this process's \
         configuration ([categories.{category}] partitions); changing it is an offline operation: \
         drain the category, then `ordo repartition {category}` (docs/OPERATIONS.md, \"Changing a \
         category's partitions\")"
    )]
    PartitioningMismatch {
        /// The category.
        category: String,
        /// How Redis records it.
        recorded: ordo_core::Partitions,
        /// How this process is configured.
        configured: ordo_core::Partitions,
    },

    /// A publication's position is one Redis already holds for its scope,
    /// recorded by another history of the source: the PostgreSQL outbox's
    /// database was restored, recovered to a point in time, failed over to
    /// an asynchronous replica or re-created (its identity,
    /// `ordo_core::contract::broker::POSITION_EPOCH_METADATA`, differs). It is not a
    /// duplicate: nothing was published, and the outbox keeps the row
    /// pending until an operator adopts Redis's positions
    /// (`ordo-pg-relay adopt`, docs/POSTGRES.md).
    #[error(
        "position {position} of `{scope}` is already held in Redis (up to {recorded_position}) from another \
         history of the outbox (outbox {recorded_epoch}, this one is {epoch}): the database was restored, \
         recovered to a point in time, failed over or re-created; not taken for a duplicate (see \
         `ordo-pg-relay adopt`, docs/POSTGRES.md)"
    )]
    HistoryConflict {
        /// The position scope (`category:key`, `category:key (backfill)`, or the category).
        scope: String,
        /// The refused position.
        position: u64,
        /// The outbox identity it came with.
        epoch: String,
        /// The last position Redis holds for the scope.
        recorded_position: u64,
        /// The identity that position was recorded with.
        recorded_epoch: String,
    },

    /// `repartition` found the category not drained: some group has
    /// messages of it still to handle, in flight, halted or parked.
    #[error(
        "category `{category}` is not drained: {what}; stop its publishers, let its workers handle \
         everything (resolve halted and parked keys), then try again"
    )]
    NotDrained {
        /// The category.
        category: String,
        /// What is left, for people.
        what: String,
    },

    /// A fenced commit named a command the commit script does not run.
    #[error("command `{command}` is not allowed in a fenced commit")]
    CommandNotAllowed {
        /// The refused command.
        command: String,
    },

    /// Ordo's Redis Functions library (its scripts, `ordo_<hash>`) is not
    /// loaded on this Redis, and this client's ACL user may not load it
    /// (`FUNCTION LOAD` is an administrator's command). Nothing was run.
    #[error(
        "Ordo's function library `{library}` is not loaded on this Redis, and this user may not load it: \
         run `ordo setup` as a Redis user that may (`FUNCTION LOAD`) (docs/OPERATIONS.md, \"Loading Ordo's \
         functions\")"
    )]
    LibraryNotLoaded {
        /// The library's name.
        library: String,
        /// Redis's refusal of `FUNCTION LOAD`.
        #[source]
        source: fred::error::Error,
    },

    /// A script or command replied with something Ordo does not expect
    /// (a version mismatch, or keys written by something else).
    #[error("unexpected reply from `{context}`: {detail}")]
    Protocol {
        /// The script or command.
        context: &'static str,
        /// What was wrong with the reply.
        detail: String,
    },

    /// An envelope could not be encoded for publishing.
    #[error("cannot encode the envelope of message `{message_id}`")]
    Encode {
        /// The message's id.
        message_id: String,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },

    /// A lease is held by another process configured with this instance id
    /// (another process start, with another nonce): two live processes
    /// share one instance id. Nothing was acquired; give each process its
    /// own id (or leave it unset for a fresh one per start).
    #[error(
        "lease `{lease}` is held by another process with instance id `{instance}`: \
         instance ids must be unique among live processes"
    )]
    DuplicateInstance {
        /// The shared instance id.
        instance: String,
        /// The lease the other process holds.
        lease: String,
    },

    /// `run` was called while this broker's consumer already runs, or still
    /// keeps leases for handler runs its shutdown gave up on (until they
    /// end): one instance id serves one consumer (build another broker for
    /// another).
    #[error("the consumer of instance `{instance}` is already running")]
    AlreadyRunning {
        /// The instance id.
        instance: String,
    },

    /// The domain configuration's `[server.partitioning]` is invalid for
    /// this broker (see [`RedisSettings::from_config`](crate::RedisSettings::from_config)).
    #[error("invalid domain configuration for the Redis broker")]
    DomainConfig(#[source] ordo_core::ConfigError),

    /// The broker was configured with an invalid value.
    #[error("invalid broker configuration: `{key}` {reason}")]
    Config {
        /// The setting.
        key: &'static str,
        /// Why it is invalid.
        reason: String,
    },
}

/// Whether a client error is of the kind a retry later cures: the
/// connection is down or timed out, a command was cancelled with it, the
/// client is backed up, or the server answered that it cannot serve it now
/// (loading, busy with a script, failing over, read-only after a failover).
fn connection_class(error: &fred::error::Error) -> bool {
    use fred::error::ErrorKind;
    const BUSY: &[&str] = &[
        "LOADING",
        "BUSY",
        "MASTERDOWN",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "READONLY",
    ];
    matches!(
        error.kind(),
        ErrorKind::IO | ErrorKind::Timeout | ErrorKind::Canceled | ErrorKind::Backpressure
    ) || BUSY.iter().any(|busy| {
        error
            .details()
            .strip_prefix(busy)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
    })
}

fn holder_text(holder: &Option<String>) -> String {
    match holder {
        Some(holder) => format!("held as `{holder}`"),
        None => "not held".to_owned(),
    }
}

impl From<fred::error::Error> for Error {
    fn from(error: fred::error::Error) -> Self {
        Self::Redis(error)
    }
}

impl From<ordo_core::ConfigError> for Error {
    fn from(error: ordo_core::ConfigError) -> Self {
        Self::DomainConfig(error)
    }
}

impl Error {
    /// Whether this is a [`Error::Fenced`] refusal.
    pub fn is_fenced(&self) -> bool {
        matches!(self, Self::Fenced { .. })
    }

    /// Whether Redis was unreachable or could not serve the command for now
    /// (the connection-class errors a retry later cures).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unavailable(_) => true,
            Self::Redis(error) => connection_class(error),
            _ => false,
        }
    }

    /// A connection-class [`Error::Redis`] as [`Error::Unavailable`] (so
    /// its chain carries the transient marker); anything else as it is.
    pub(crate) fn classified(self) -> Self {
        match self {
            Self::Redis(error) if connection_class(&error) => {
                Self::Unavailable(ordo_core::contract::retry::Transient::new(error))
            }
            other => other,
        }
    }

    /// Whether Redis refused a command because a Redis Cluster slot it named
    /// is served by another node now (`MOVED`, `ASK`, or a script touching a
    /// key its node does not serve): the caller's view of the cluster is out
    /// of date, and a retry after refreshing it can succeed.
    pub(crate) fn is_moved_slot(&self) -> bool {
        let Self::Redis(error) = self else {
            return false;
        };
        let details = error.details();
        *error.kind() == fred::error::ErrorKind::Cluster
            || details.starts_with("MOVED")
            || details.starts_with("ASK")
            || details.contains("non local key")
    }

    /// The same error for one more caller, when one failed call answers
    /// several (the group commit's): a Redis error as it is, anything else
    /// as a protocol error that carries its text.
    pub(crate) fn again(&self) -> Self {
        match self {
            Self::Redis(error) => Self::Redis(error.clone()),
            Self::Protocol { context, detail } => Self::protocol(context, detail.clone()),
            other => Self::protocol("a shared call", ordo_core::contract::error::error_chain(other)),
        }
    }

    pub(crate) fn protocol(context: &'static str, detail: impl Into<String>) -> Self {
        Self::Protocol {
            context,
            detail: detail.into(),
        }
    }
}

/// The result of the broker's operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

//! The Redis broker of Ordo: atomic partitioned publishing and the fenced,
//! fairly shared partition consumer.
//!
//! - **Publishing** ([`RedisBroker`] as an `ordo_core::Broker`): each
//!   message is added to its partition stream `{category:key}` (or the
//!   backfill lane `{category:key}:{suffix}`) and its key to the category
//!   index in one script, so a publish never races a reap. Non-partitioned
//!   categories go to their base stream `category`.
//! - **Ownership**: one instance holds a lease per partition (per
//!   correlation value for a `sequential_by` process manager). The lease
//!   carries a fencing token that grows at every change of owner; every
//!   read, acknowledgement, reclaim, halt, reap and fenced effect is one
//!   script that checks the lease first. A stale owner gets
//!   [`Error::Fenced`] and stops touching the partition.
//! - **Fair share**: live instances announce themselves; each owns its share
//!   of every group's partitions and hands surplus over between messages.
//! - **Idle cost**: one heartbeat script per Redis node renews every lease,
//!   an idle partition costs no command (its armed doorbell is rung by the
//!   next publish), one discovery read per category, node and interval finds
//!   partitions: the command count is independent of the partitions owned.
//! - **Halts** are recorded and listed; [`PartitionAdmin`] inspects, skips,
//!   dead-letters or retries a halted head, optionally only if it is still
//!   the entry the operator inspected ([`HeadAction::expecting`]).
//! - **Fenced effects**: [`RedisFence`] (attached to every handler context)
//!   commits a handler's Redis writes only while its lease holds.
//!
//! Key names: every name Ordo uses in Redis is formatted (and parsed) in
//! one module; [`layout`] lists them as docs/REDIS.md shows them. A
//! partition's names share the hash tag `{category:key}`, so on Redis
//! Cluster each partition lives in one slot; the category index and the
//! halted set are split into buckets of their own.
//!
//! # Stability
//!
//! The public API is the broker ([`RedisBroker`]), fenced effects
//! ([`RedisFence`]), the process store, the operator views
//! ([`PartitionAdmin`], [`ClusterStatus`]) and the key names
//! ([`PartitionKeys`], [`layout`]). The partition owner's internals
//! (`Partitions`, `Lease`, `LeaseKeys`, `ReadOutcome`, `ReapOutcome`,
//! `HaltReason`, `Idle`, `DecodeEntryError`, the acknowledgements, the
//! category-wide names and the group registry) are exported in one module,
//! `internals`, hidden from the docs, for Ordo's own tests, benchmarks and
//! harness: they are **unstable** and may change in any release.

// The wings, from the ground up: each imports only wings listed above it
// (`ops` and `consumer` not each other).

// The crate's errors and the broker's own settings: imported by every wing.
mod error;
mod settings;
// Reaching Redis: client configuration, TLS, per-node commands, masked URLs.
mod net;
// Redis as Ordo stores it, the only wing that knows a Redis name: key names,
// the Lua scripts, the shared records (buckets, groups, partitioning,
// positions), the ACL rules and the administrator's setup.
mod store;
// Owning a partition: the lease and every operation fenced by it (read,
// acknowledge, halt, park, reap, fenced effects, process state, pauses).
mod owner;
// For operators: cluster status, group health, decisions on halted heads.
mod ops;
// The consumer of one instance: supervisor, waker, heartbeat, fair share,
// the partition workers (per key and hashed over one delivery module), plain
// consumers, metrics.
mod consumer;
// Publishing a message to its partition stream (or a category's base stream).
mod publish;
// Sending commands to the owner of their key, and reading their outcomes.
mod command;
// The broker: builds the clients, runs publishing and the consumer.
mod broker;

pub use broker::{RedisBroker, RedisBrokerBuilder};
pub use error::{Error, Result};
/// The Redis client Ordo is built on, for building clients and effects
/// that match its version.
pub use fred;
pub use net::connection::{client_config, client_config_with_tls};
pub use net::secret::{SecretUrl, redact_url};
pub use net::tls::TlsFiles;
pub use ops::admin::{HeadAction, Inspection, PartitionAdmin};
pub use ops::halts::HaltedPartition;
pub use ops::health;
pub use ops::status::{
    ClusterStatus, DeadLetter, DeadLetterPage, GroupPosition, Instance, LAG_COUNT_LIMIT, LaneStatus,
    LeaseHolder, PartitionStatus, plain_dlq,
};
pub use owner::fence::{FencedWrite, RedisFence};
pub use owner::partition::StreamEntry;
pub use owner::pause::PausedInstance;
pub use owner::process::RedisProcessStore;
pub use settings::{ReapPolicy, RedisConfig, RedisSettings};
pub use store::acl::{AclRole, AclScope};
pub use store::keys::{PartitionId, PartitionKeys, Routing, layout};
pub use store::setup;

/// The partition owner's internals, for Ordo's own tests, benchmarks and
/// harness: **unstable** (see "Stability" above).
#[doc(hidden)]
pub mod internals {
    pub use crate::owner::ack::{Ack, Acked};
    pub use crate::owner::lease::Lease;
    pub use crate::owner::partition::{
        DecodeEntryError, HaltReason, Idle, Partitions, ReadOutcome, ReapOutcome,
    };
    pub use crate::store::buckets::{mark_joining, register_group};
    pub use crate::store::keys::LeaseKeys;

    /// Category- and group-wide names.
    pub mod names {
        pub use crate::store::keys::{
            doorbell_channel, group_registry, group_registry_copy, halted, halted_directory, index,
            index_directory, index_version, instances, joining, joining_copy, lease_member, member,
            partitioning, paused,
        };
    }
}

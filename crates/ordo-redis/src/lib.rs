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
//! `HaltReason`, `Idle`, `DecodeEntryError`) are
//! exported, hidden from the docs, for Ordo's own tests, benchmarks and
//! harness: they are **unstable** and may change in any release.

mod broker;
mod consumer;
mod error;
mod net;
mod ops;
mod owner;
mod publish;
mod settings;
mod store;

pub use ops::health;
pub use store::setup;

pub use broker::{RedisBroker, RedisBrokerBuilder};
pub use error::{Error, Result};
/// The Redis client Ordo is built on, for building clients and effects
/// that match its version.
pub use fred;
pub use net::connection::{client_config, client_config_with_tls};
pub use net::secret::{SecretUrl, redact_url};
pub use net::tls::TlsFiles;
pub use ops::admin::{HaltedPartition, HeadAction, Inspection, PartitionAdmin};
pub use owner::fence::{FencedWrite, RedisFence};
pub use owner::partition::StreamEntry;
pub use owner::pause::PausedInstance;
pub use settings::{ReapPolicy, RedisSettings};
pub use store::acl::{AclRole, AclScope};
pub use store::keys::{PartitionId, PartitionKeys, Routing, layout};

// Unstable owner internals (see "Stability" above).
#[doc(hidden)]
pub use store::keys::LeaseKeys;
/// Category- and group-wide names (unstable, for tests and tools).
#[doc(hidden)]
pub mod names {
    pub use crate::store::keys::{
        doorbell_channel, group_registry, group_registry_copy, halted, halted_directory, index,
        index_directory, instances, joining, joining_copy, partitioning, paused,
    };
}
/// Registering groups by hand (unstable, for tests and tools).
#[doc(hidden)]
pub mod registry {
    pub use crate::store::buckets::{mark_joining, register_group};
}
pub use ops::status::{
    ClusterStatus, DeadLetter, DeadLetterPage, GroupPosition, Instance, LAG_COUNT_LIMIT, LaneStatus,
    LeaseHolder, PartitionStatus, plain_dlq,
};
#[doc(hidden)]
pub use owner::ack::{Ack, Acked};
#[doc(hidden)]
pub use owner::lease::Lease;
#[doc(hidden)]
pub use owner::partition::{DecodeEntryError, HaltReason, Idle, Partitions, ReadOutcome, ReapOutcome};
pub use owner::process::RedisProcessStore;

//! The Redis broker of Ordo: atomic partitioned publishing and the fenced,
//! fairly shared partition consumer.
//!
//! - **Publishing** ([`RedisBroker`] as an `ordo_core::Broker`): each
//!   message is added to its partition stream `{category}:{key}` (or the
//!   backfill lane `{category}:{key}:{suffix}`) and its key to the index
//!   `{category}:__partitions__` in one script, so a publish never races a
//!   reap. Non-partitioned categories go to their base stream `{category}`.
//! - **Ownership**: one instance holds a lease per partition (per
//!   correlation value for a `sequential_by` process manager). The lease
//!   carries a fencing token that grows at every change of owner; every
//!   read, acknowledgement, reclaim, halt, reap and fenced effect is one
//!   script that checks the lease first ([`Partitions`]). A stale owner gets
//!   [`Error::Fenced`] and stops touching the partition.
//! - **Fair share**: live instances announce themselves; each owns its share
//!   of every group's partitions and hands surplus over between messages.
//! - **Idle cost**: one heartbeat script renews every lease, one blocking
//!   `XREAD` waits on every idle stream, one `SMEMBERS` per category and
//!   interval discovers partitions: independent of the partitions owned.
//! - **Halts** are recorded and listed; [`PartitionAdmin`] inspects, skips,
//!   dead-letters or retries a halted head, optionally only if it is still
//!   the entry the operator inspected ([`HeadAction::expecting`]).
//! - **Fenced effects**: [`RedisFence`] (attached to every handler context)
//!   commits a handler's Redis writes only while its lease holds.
//!
//! Redis Cluster: every per-partition bookkeeping key is tagged with the
//! partition's primary stream name, so the lease, read, acknowledgement and
//! halt scripts of a partition's primary lane touch one slot. The backfill
//! lane, the category index, the group registry and `ordo:halted` keep the
//! names of the contract and live in other slots, so the scripts that span
//! them (publish, reads that check both lanes, reap, halt) need a
//! single-node Redis (or a Cluster deployment that maps them to one node).

mod admin;
mod broker;
mod connection;
mod consumer;
mod error;
mod fence;
mod keys;
mod lease;
mod metrics;
mod partition;
mod process;
mod publish;
mod scripts;
mod status;

pub use admin::{HaltedPartition, HeadAction, Inspection, PartitionAdmin};
pub use broker::{RedisBroker, RedisBrokerBuilder};
pub use error::{Error, Result};
pub use fence::{FencedWrite, RedisFence};
pub use keys::{LeaseKeys, PartitionId, PartitionKeys, layout};
pub use lease::Lease;
pub use partition::{DecodeEntryError, HaltReason, Idle, Partitions, ReadOutcome, ReapOutcome, StreamEntry};
pub use process::RedisProcessStore;
pub use status::{
    ClusterStatus, DeadLetter, GroupPosition, Instance, LAG_COUNT_LIMIT, LaneStatus, LeaseHolder,
    PartitionStatus,
};

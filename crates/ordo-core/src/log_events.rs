//! The stable names of Ordo's important log lines.
//!
//! Each of these log lines carries its name as the `event` field
//! (`event = "partition.halted"`), so alerts and dashboards can match the
//! name instead of the message text, which may change. The names are
//! stable: a name is never reused for another meaning, and removing one is
//! a breaking change noted in the changelog. `docs/OPERATIONS.md` lists
//! them with their level and fields (a test checks that the list there and
//! [`ALL`] agree).

/// An attempt of a handler failed; it will be retried (warn).
pub const HANDLER_FAILED: &str = "handler.failed";
/// An attempt of a handler failed transiently (a dependency is down); it
/// will be retried without using up an attempt (warn).
pub const HANDLER_TRANSIENT_FAILURE: &str = "handler.transient_failure";
/// An attempt ran past the handler's timeout and was cancelled (warn).
pub const HANDLER_TIMED_OUT: &str = "handler.timed_out";
/// Most keys of a handler failed transiently: it stops starting messages
/// in this process and probes with one at a time (warn).
pub const HANDLER_PAUSED: &str = "handler.paused";
/// A paused handler's attempt got an answer: it runs again (info).
pub const HANDLER_RESUMED: &str = "handler.resumed";
/// A message failed every attempt (or failed transiently past
/// `max_transient_ms`) and its key (partition) halted until an operator
/// resolves it (error, on every broker; the halt is listed until resolved).
pub const PARTITION_HALTED: &str = "partition.halted";
/// A message of a hashed partition failed every attempt and its key was
/// parked: its messages are held aside, the partition's other keys flow
/// (error; the parked key is listed until resolved).
pub const KEY_PARKED: &str = "key.parked";
/// A halted key of the inline broker was resolved (skip, retry, dead-letter) (info).
pub const PARTITION_RESUMED: &str = "partition.resumed";
/// A drained, idle partition was retired (info).
pub const PARTITION_REAPED: &str = "partition.reaped";
/// A message of a handler without a key failed every attempt and was
/// dead-lettered (error, on every broker).
pub const MESSAGE_DEAD_LETTERED: &str = "message.dead_lettered";
/// This instance took a partition's lease (info).
pub const LEASE_ACQUIRED: &str = "lease.acquired";
/// This instance lost a lease (another owner took it, or renewals failed
/// for most of a TTL); its worker stops (warn or info).
pub const LEASE_LOST: &str = "lease.lost";
/// Renewing the held leases failed; retried at the next beat (warn).
pub const LEASE_RENEWAL_FAILED: &str = "lease.renewal_failed";
/// A discovery round (reading the partition indexes from Redis) failed (warn).
pub const DISCOVERY_FAILED: &str = "discovery.failed";
/// An outbox row with an invalid partition key was abandoned (warn).
pub const OUTBOX_ROW_ABANDONED: &str = "outbox.row_abandoned";
/// Publishing outbox rows to the broker failed; retried (warn).
pub const OUTBOX_PUBLISH_FAILED: &str = "outbox.publish_failed";
/// Outbox rows were left unpublished at shutdown (error).
pub const OUTBOX_UNPUBLISHED_AT_SHUTDOWN: &str = "outbox.unpublished_at_shutdown";
/// The broker's consumer stopped with an error (error).
pub const CONSUMER_FAILED: &str = "consumer.failed";

/// Every name above, in the order `docs/OPERATIONS.md` lists them.
pub const ALL: &[&str] = &[
    HANDLER_FAILED,
    HANDLER_TRANSIENT_FAILURE,
    HANDLER_TIMED_OUT,
    HANDLER_PAUSED,
    HANDLER_RESUMED,
    PARTITION_HALTED,
    KEY_PARKED,
    PARTITION_RESUMED,
    PARTITION_REAPED,
    MESSAGE_DEAD_LETTERED,
    LEASE_ACQUIRED,
    LEASE_LOST,
    LEASE_RENEWAL_FAILED,
    DISCOVERY_FAILED,
    OUTBOX_ROW_ABANDONED,
    OUTBOX_PUBLISH_FAILED,
    OUTBOX_UNPUBLISHED_AT_SHUTDOWN,
    CONSUMER_FAILED,
];

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
/// dead-lettered, or an entry that can never be handled (unreadable on a
/// base stream, of no key of its hashed partition) was moved to the
/// dead-letter stream (error, on every broker).
pub const MESSAGE_DEAD_LETTERED: &str = "message.dead_lettered";
/// An entry of a command partition that is not a command (it does not
/// decode, or names another partition) was dropped: nobody can be answered
/// about it, and a command key never halts (error).
pub const COMMAND_DROPPED: &str = "command.dropped";
/// The Redis broker connected, with its URL (password masked) and this
/// instance's id (info).
pub const REDIS_CONNECTED: &str = "redis.connected";
/// The consumer started for a handler, with the categories it consumes (info,
/// one line per handler).
pub const CONSUMER_STARTED: &str = "consumer.started";
/// The consumer stopped: its partitions released, its instance gone from the
/// instance sets (info).
pub const CONSUMER_STOPPED: &str = "consumer.stopped";
/// A discovery round took partitions: how many, and how many this instance
/// now owns (info; one line per round, not per partition).
pub const PARTITIONS_ACQUIRED: &str = "partitions.acquired";
/// Partitions this instance let go: how many, and why (over its share, at
/// shutdown) (info; one line per round or shutdown, not per partition).
pub const PARTITIONS_RELEASED: &str = "partitions.released";
/// This instance took a partition's lease (debug: one line per partition;
/// [`PARTITIONS_ACQUIRED`] sums them up at info).
pub const LEASE_ACQUIRED: &str = "lease.acquired";
/// This instance lost a lease (another owner took it, its member key
/// expired, or renewals failed for most of a TTL); its worker stops (warn
/// or info).
pub const LEASE_LOST: &str = "lease.lost";
/// Renewing the member key the held leases depend on failed; retried at
/// the next beat (warn).
pub const LEASE_RENEWAL_FAILED: &str = "lease.renewal_failed";
/// A shutdown gave up on handler runs that are still going on (blocking
/// code ignores the abort): their leases stay renewed until the runs end,
/// then are released (warn).
pub const LEASE_KEPT_FOR_RUN: &str = "lease.kept_for_run";
/// A discovery round (reading the partition indexes from Redis) failed (warn).
pub const DISCOVERY_FAILED: &str = "discovery.failed";
/// An outbox row with an invalid partition key was abandoned (warn).
pub const OUTBOX_ROW_ABANDONED: &str = "outbox.row_abandoned";
/// An outbox row that cannot be read (its envelope is not JSON, its lane
/// unknown, or it is larger than the relay may publish) was abandoned with
/// the reason; the rows behind it go on (error).
pub const OUTBOX_ROW_UNREADABLE: &str = "outbox.row_unreadable";
/// Publishing outbox rows to the broker failed; retried (warn).
pub const OUTBOX_PUBLISH_FAILED: &str = "outbox.publish_failed";
/// The broker refused an outbox row for a reason of its key's or
/// category's own (a category it partitions otherwise, a position it holds
/// from another history of the database): the row stays pending with the
/// reason, its key (or category) waits, the others go on (error).
pub const OUTBOX_PUBLISH_REFUSED: &str = "outbox.publish_refused";
/// Outbox rows were left unpublished at shutdown (error).
pub const OUTBOX_UNPUBLISHED_AT_SHUTDOWN: &str = "outbox.unpublished_at_shutdown";
/// The broker's consumer stopped with an error (error).
pub const CONSUMER_FAILED: &str = "consumer.failed";
/// This process loaded Ordo's Redis Functions library, which the server
/// lacked (first start, or a restart that lost it) (info).
pub const REDIS_LIBRARY_LOADED: &str = "redis.library_loaded";
/// A PostgreSQL outbox relay started, with its id and the outbox's slot
/// count (info).
pub const RELAY_STARTED: &str = "relay.started";
/// A PostgreSQL outbox relay stopped and released its slots (info).
pub const RELAY_STOPPED: &str = "relay.stopped";
/// The operator console (`ordo console`) serves, with its address and
/// whether it allows actions (info).
pub const CONSOLE_STARTED: &str = "console.started";
/// An operator acted from the console: retry, skip, dead-letter or replay,
/// on which key and head, applied (info) or refused (warn).
pub const CONSOLE_ACTION: &str = "console.action";
/// A console action was refused before it was tried: read-only console,
/// no or wrong token, a cross-site request (warn).
pub const CONSOLE_ACTION_DENIED: &str = "console.action_denied";

/// Every name above, in the order `docs/OPERATIONS.md` lists them.
pub const ALL: &[&str] = &[
    REDIS_CONNECTED,
    CONSUMER_STARTED,
    CONSUMER_STOPPED,
    PARTITIONS_ACQUIRED,
    PARTITIONS_RELEASED,
    RELAY_STARTED,
    RELAY_STOPPED,
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
    COMMAND_DROPPED,
    LEASE_ACQUIRED,
    LEASE_LOST,
    LEASE_RENEWAL_FAILED,
    LEASE_KEPT_FOR_RUN,
    DISCOVERY_FAILED,
    OUTBOX_ROW_ABANDONED,
    OUTBOX_ROW_UNREADABLE,
    OUTBOX_PUBLISH_FAILED,
    OUTBOX_PUBLISH_REFUSED,
    OUTBOX_UNPUBLISHED_AT_SHUTDOWN,
    CONSUMER_FAILED,
    REDIS_LIBRARY_LOADED,
    CONSOLE_STARTED,
    CONSOLE_ACTION,
    CONSOLE_ACTION_DENIED,
];

//! Where the harness keeps its records in Redis (all under `harness:`).
//!
//! Ordo's own keys (streams, leases, halts) are described by ordo-redis;
//! [`lease`] and [`partition`] name the ones the harness reads.

use ordo_redis::PartitionKeys;

use crate::tick::CATEGORY;
use crate::worker::GROUP;

/// The number of runs that started while another run of the same key was
/// in flight under a lease that was still valid.
pub const OVERLAPS: &str = "harness:overlaps";

/// One entry per detected overlap: `{their marker} vs {my marker}`.
pub const OVERLAP_LOG: &str = "harness:overlap_log";

/// The number of runs that found their lease already lost when they began
/// (and so did not start): a stale owner invoked its handler.
pub const STALE_STARTS: &str = "harness:stale_starts";

/// Per key, how many events were published (their seqs are `0..count`).
pub const PUBLISHED: &str = "harness:published";

/// The applied effects of `key`, in commit order: `{seq}:{token}` entries,
/// appended by fenced commits only.
pub fn applied(key: &str) -> String {
    format!("harness:applied:{key}")
}

/// Per seq of `key`, how many handler runs started (retries and re-runs
/// after a failover included; recorded before the run, unfenced).
pub fn starts(key: &str) -> String {
    format!("harness:starts:{key}")
}

/// Per seq of `key`, how many runs committed their effect (fenced).
pub fn runs(key: &str) -> String {
    format!("harness:runs:{key}")
}

/// The in-flight marker of `key`: `{token}:{run id}` of the run in progress.
pub fn marker(key: &str) -> String {
    format!("harness:inflight:{key}")
}

/// The runs of `key` that have ended (committed or failed): a command of
/// such a run that reaches Redis late (delayed on its connection after its
/// client gave up on it and retried) must not mark it in flight again.
pub fn ended(key: &str) -> String {
    format!("harness:ended:{key}")
}

/// The streams and Ordo bookkeeping keys of `key`'s partition.
pub fn partition(key: &str) -> PartitionKeys {
    PartitionKeys::new(CATEGORY, key, ordo_core::key::DEFAULT_BACKFILL_SUFFIX)
}

/// The lease key of the worker's handler on `key`'s partition; it holds
/// `{instance}:{token}` while owned.
pub fn lease(key: &str) -> String {
    partition(key).lease(GROUP).lease
}

/// The dead-letter stream of `key`'s partition.
pub fn dlq(key: &str) -> String {
    partition(key).dlq()
}

//! Where the harness keeps its records in Redis.
//!
//! A key's records carry its partition's hash tag
//! (`{bench:k0}:harness:applied`): a fenced commit may only touch the slot
//! of its lease on a Redis Cluster, and the run-start script writes them
//! with the partition's other records. Only [`PUBLISHED`] is global.
//!
//! Ordo's own keys (streams, leases, halts) are described by ordo-redis;
//! [`lease`] and [`partition`] name the ones the harness reads.

use ordo_redis::PartitionKeys;

use crate::tick::CATEGORY;
use crate::worker::GROUP;

/// The number of runs of `key` that started while another run of it was in
/// flight under a lease that was still valid.
pub fn overlaps(key: &str) -> String {
    tagged(key, "overlaps")
}

/// One entry per detected overlap on `key`: `{their marker} vs {my marker}`.
pub fn overlap_log(key: &str) -> String {
    tagged(key, "overlap_log")
}

/// The number of runs of `key` that found their lease already lost when they
/// began (and so did not start): a stale owner invoked its handler.
pub fn stale_starts(key: &str) -> String {
    tagged(key, "stale_starts")
}

/// Per key, how many events were published (their seqs are `0..count`).
pub const PUBLISHED: &str = "harness:published";

/// A record of `key`, in its partition's slot.
fn tagged(key: &str, what: &str) -> String {
    format!("{}:harness:{what}", partition(key).primary())
}

/// The applied effects of `key`, in commit order: `{seq}:{token}` entries,
/// appended by fenced commits only.
pub fn applied(key: &str) -> String {
    tagged(key, "applied")
}

/// Per seq of `key`, how many handler runs started (retries and re-runs
/// after a failover included; recorded before the run, unfenced).
pub fn starts(key: &str) -> String {
    tagged(key, "starts")
}

/// Per seq of `key`, how many runs committed their effect (fenced).
pub fn runs(key: &str) -> String {
    tagged(key, "runs")
}

/// The in-flight marker of `key`: `{token}:{run id}` of the run in progress.
pub fn marker(key: &str) -> String {
    tagged(key, "inflight")
}

/// The runs of `key` that have ended (committed or failed): a command of
/// such a run that reaches Redis late (delayed on its connection after its
/// client gave up on it and retried) must not mark it in flight again.
pub fn ended(key: &str) -> String {
    tagged(key, "ended")
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

#[cfg(test)]
mod tests {
    use fred::types::cluster::ClusterRouting;

    use super::*;

    /// A fenced commit touches the lease and the records it writes in one
    /// script, which a Redis Cluster runs only when they share a slot.
    #[test]
    fn a_keys_records_share_its_lease_slot() {
        for key in ["k0", "k1", "k17"] {
            let slot = ClusterRouting::hash_key(lease(key).as_bytes());
            for record in [
                applied(key),
                starts(key),
                runs(key),
                marker(key),
                ended(key),
                overlaps(key),
                overlap_log(key),
                stale_starts(key),
            ] {
                assert_eq!(
                    ClusterRouting::hash_key(record.as_bytes()),
                    slot,
                    "{record} of {key}"
                );
            }
        }
    }
}

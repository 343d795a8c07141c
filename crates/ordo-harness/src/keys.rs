//! Where the harness keeps its records in Redis.
//!
//! A key's records carry the hash tag of the partition the key goes to
//! (`{chaos:k0}:harness:applied` with a partition per key,
//! `{chaos:__7__}:harness:applied:k0` in hashed partition 7): a fenced
//! commit may only touch the slot of its lease on a Redis Cluster, and the
//! run-start script writes them with the partition's other records. Only
//! [`PUBLISHED`] is global.
//!
//! [`Records`] names them for a routing (how the `chaos` category is
//! partitioned); the free functions name them for the default, a partition
//! per key.
//!
//! Ordo's own keys (streams, leases, halts) are described by ordo-redis;
//! [`Records::lease`] and [`Records::partition`] name the ones the harness reads.

use ordo_redis::{PartitionKeys, Routing};

use crate::tick::{CATEGORY, GROUP};

/// Per key, how many events were published (their seqs are `0..count`).
pub const PUBLISHED: &str = "harness:published";

/// The names of the harness's records and of the partitions they sit
/// beside, under one routing of the `chaos` category.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Records {
    routing: Routing,
}

impl Records {
    /// The names under `routing` (`Routing::new(&config)`).
    pub fn new(routing: Routing) -> Self {
        Self { routing }
    }

    /// The routing the names follow.
    pub fn routing(&self) -> &Routing {
        &self.routing
    }

    /// The number of runs of `key` that started while another run of it was
    /// in flight under a lease that was still valid.
    pub fn overlaps(&self, key: &str) -> String {
        self.tagged(key, "overlaps")
    }

    /// One entry per detected overlap on `key`: `{their marker} vs {my marker}`.
    pub fn overlap_log(&self, key: &str) -> String {
        self.tagged(key, "overlap_log")
    }

    /// The number of runs of `key` that found their lease already lost when
    /// they began (and so did not start): a stale owner invoked its handler.
    pub fn stale_starts(&self, key: &str) -> String {
        self.tagged(key, "stale_starts")
    }

    /// The applied effects of `key`, in commit order: `{seq}:{token}`
    /// entries, appended by fenced commits only.
    pub fn applied(&self, key: &str) -> String {
        self.tagged(key, "applied")
    }

    /// Per seq of `key`, how many handler runs started (retries and re-runs
    /// after a failover included; recorded before the run, unfenced).
    pub fn starts(&self, key: &str) -> String {
        self.tagged(key, "starts")
    }

    /// Per seq of `key`, how many runs committed their effect (fenced).
    pub fn runs(&self, key: &str) -> String {
        self.tagged(key, "runs")
    }

    /// The in-flight marker of `key`: `{token}:{run id}` of the run in progress.
    pub fn marker(&self, key: &str) -> String {
        self.tagged(key, "inflight")
    }

    /// The runs of `key` started by workers in blocking mode
    /// (`--blocking-work`), in start order: `{instance} {token} {start
    /// ms}`, the start by Redis's clock.
    pub fn blocking_starts(&self, key: &str) -> String {
        self.tagged(key, "blocking_starts")
    }

    /// The runs of `key` that have ended (committed or failed): a command
    /// of such a run that reaches Redis late (delayed on its connection
    /// after its client gave up on it and retried) must not mark it in
    /// flight again.
    pub fn ended(&self, key: &str) -> String {
        self.tagged(key, "ended")
    }

    /// The streams and Ordo bookkeeping keys of the partition `key` goes to
    /// (its own, or the hashed partition it shares with other keys).
    pub fn partition(&self, key: &str) -> PartitionKeys {
        PartitionKeys::of(
            self.routing.partition_of(CATEGORY, key),
            ordo_core::contract::key::DEFAULT_BACKFILL_SUFFIX,
        )
    }

    /// The lease key of the worker's handler on `key`'s partition; it holds
    /// `{instance}:{token}` while owned.
    pub fn lease(&self, key: &str) -> String {
        self.partition(key).lease(GROUP).lease
    }

    /// A record of `key`, in its partition's slot; named after the key too
    /// when the partition holds other keys.
    fn tagged(&self, key: &str, what: &str) -> String {
        let partition = self.partition(key);
        if partition.id().is_hashed() {
            format!("{}:harness:{what}:{key}", partition.primary())
        } else {
            format!("{}:harness:{what}", partition.primary())
        }
    }
}

/// Where the harness keeps the records of its commands
/// ([`Poke`](crate::commands::Poke)): beside each command key's partition
/// (`{chaos.commands:c0}:harness:applied`), apart from the events' records,
/// so the event figures and the command figures never mix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandRecords {
    routing: Routing,
}

impl CommandRecords {
    /// The names under `routing` (`Routing::new(&config)`).
    pub fn new(routing: Routing) -> Self {
        Self { routing }
    }

    /// The number of command runs of `key` that started while another run
    /// of it was in flight under a lease that was still valid.
    pub fn overlaps(&self, key: &str) -> String {
        self.tagged(key, "overlaps")
    }

    /// One entry per detected overlap on `key`: `{their marker} vs {my marker}`.
    pub fn overlap_log(&self, key: &str) -> String {
        self.tagged(key, "overlap_log")
    }

    /// The number of command runs of `key` that found their lease already
    /// lost when they began (and so did not start).
    pub fn stale_starts(&self, key: &str) -> String {
        self.tagged(key, "stale_starts")
    }

    /// Per `{sender}:{seq}` of `key`, how many runs started (unfenced).
    pub fn starts(&self, key: &str) -> String {
        self.tagged(key, "starts")
    }

    /// The in-flight marker of `key`: `{token}:{run id}` of the run in progress.
    pub fn marker(&self, key: &str) -> String {
        self.tagged(key, "inflight")
    }

    /// The runs of `key` that have ended (see [`Records::ended`]).
    pub fn ended(&self, key: &str) -> String {
        self.tagged(key, "ended")
    }

    /// The effects of `key`'s commands, in commit order:
    /// `{sender}:{seq}:{token}` entries, appended by fenced commits only.
    pub fn applied(&self, key: &str) -> String {
        self.tagged(key, "applied")
    }

    /// The commands of `key` whose senders got a success, in the order
    /// they got it: `{sender}:{seq}` entries.
    pub fn acked(&self, key: &str) -> String {
        self.tagged(key, "acked")
    }

    /// The commands of `key` whose senders got a failure outcome:
    /// `{sender}:{seq} {reason}` entries.
    pub fn failed(&self, key: &str) -> String {
        self.tagged(key, "failed")
    }

    /// The commands of `key` with a generated id whose sender got no
    /// outcome (a timeout, a broker error) and went on without one: they
    /// may still run, at any time. `{sender}:{seq}` entries.
    pub fn abandoned(&self, key: &str) -> String {
        self.tagged(key, "abandoned")
    }

    /// The replies of `key` that were not about the command sent:
    /// `{sender}:{seq} {reply}` entries.
    pub fn wrong_replies(&self, key: &str) -> String {
        self.tagged(key, "wrong_replies")
    }

    /// How many times senders sent a command of `key` again under its id
    /// (after a timeout or a broker error).
    pub fn resends(&self, key: &str) -> String {
        self.tagged(key, "resends")
    }

    /// The streams and Ordo bookkeeping keys of the command partition `key`
    /// goes to.
    pub fn partition(&self, key: &str) -> PartitionKeys {
        let category = ordo_core::contract::command::command_category(CATEGORY);
        PartitionKeys::of(
            self.routing.partition_of(&category, key),
            ordo_core::contract::key::DEFAULT_BACKFILL_SUFFIX,
        )
    }

    /// A record of `key`, in its command partition's slot.
    fn tagged(&self, key: &str, what: &str) -> String {
        let partition = self.partition(key);
        if partition.id().is_hashed() {
            format!("{}:harness:{what}:{key}", partition.primary())
        } else {
            format!("{}:harness:{what}", partition.primary())
        }
    }
}

/// [`Records::overlaps`] with a partition per key.
pub fn overlaps(key: &str) -> String {
    Records::default().overlaps(key)
}

/// [`Records::overlap_log`] with a partition per key.
pub fn overlap_log(key: &str) -> String {
    Records::default().overlap_log(key)
}

/// [`Records::stale_starts`] with a partition per key.
pub fn stale_starts(key: &str) -> String {
    Records::default().stale_starts(key)
}

/// [`Records::applied`] with a partition per key.
pub fn applied(key: &str) -> String {
    Records::default().applied(key)
}

/// [`Records::starts`] with a partition per key.
pub fn starts(key: &str) -> String {
    Records::default().starts(key)
}

/// [`Records::runs`] with a partition per key.
pub fn runs(key: &str) -> String {
    Records::default().runs(key)
}

/// [`Records::marker`] with a partition per key.
pub fn marker(key: &str) -> String {
    Records::default().marker(key)
}

/// [`Records::ended`] with a partition per key.
pub fn ended(key: &str) -> String {
    Records::default().ended(key)
}

/// [`Records::partition`] with a partition per key.
pub fn partition(key: &str) -> PartitionKeys {
    Records::default().partition(key)
}

/// [`Records::lease`] with a partition per key.
pub fn lease(key: &str) -> String {
    Records::default().lease(key)
}

/// The dead-letter stream of `key`'s partition (a partition per key).
pub fn dlq(key: &str) -> String {
    partition(key).dlq()
}

#[cfg(test)]
mod tests {
    use fred::types::cluster::ClusterRouting;

    use super::*;

    fn hashed(n: u32) -> Records {
        let config = ordo_core::Config::default()
            .with_partitions(CATEGORY, ordo_core::Partitions::Hashed(n.try_into().unwrap()));
        Records::new(Routing::new(&config))
    }

    /// A fenced commit touches the lease and the records it writes in one
    /// script, which a Redis Cluster runs only when they share a slot.
    #[test]
    fn a_keys_records_share_its_lease_slot() {
        for records in [Records::default(), hashed(4)] {
            for key in ["k0", "k1", "k17"] {
                let slot = ClusterRouting::hash_key(records.lease(key).as_bytes());
                for record in [
                    records.applied(key),
                    records.starts(key),
                    records.runs(key),
                    records.marker(key),
                    records.ended(key),
                    records.blocking_starts(key),
                    records.overlaps(key),
                    records.overlap_log(key),
                    records.stale_starts(key),
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

    #[test]
    fn command_records_sit_in_their_command_partitions_slot_apart_from_the_events() {
        let commands = CommandRecords::default();
        assert_eq!(commands.applied("c0"), "{chaos.commands:c0}:harness:applied");
        assert_ne!(commands.applied("k0"), applied("k0"));
        let slot = ClusterRouting::hash_key(commands.partition("c3").primary().as_bytes());
        for record in [
            commands.applied("c3"),
            commands.acked("c3"),
            commands.marker("c3"),
            commands.ended("c3"),
            commands.overlaps("c3"),
        ] {
            assert_eq!(ClusterRouting::hash_key(record.as_bytes()), slot, "{record}");
        }
    }

    #[test]
    fn in_hashed_partitions_each_key_keeps_records_of_its_own() {
        let records = hashed(4);
        let index = ordo_core::contract::key::hashed_partition("k1", 4.try_into().unwrap());
        assert_eq!(
            records.lease("k1"),
            format!("{{chaos:__{index}__}}:lease:{GROUP}")
        );
        assert_eq!(
            records.applied("k1"),
            format!("{{chaos:__{index}__}}:harness:applied:k1")
        );
        // Keys of one partition: one lease, records apart.
        let mate = (0..100)
            .map(|i| format!("k{i}"))
            .find(|key| key != "k1" && records.lease(key) == records.lease("k1"))
            .expect("100 keys over 4 partitions share some");
        assert_ne!(records.applied(&mate), records.applied("k1"));
        // The default keeps the per-key names.
        assert_eq!(applied("k1"), "{chaos:k1}:harness:applied");
        assert_eq!(Records::default().lease("k1"), lease("k1"));
    }
}

//! What Redis holds for partitions that did not drain: the evidence a
//! report needs when events are still unapplied at the deadline.

use std::collections::HashMap;

use anyhow::Result;
use fred::clients::Pool;
use fred::interfaces::{KeysInterface as _, StreamsInterface as _};
use fred::types::Value;
use ordo_core::contract::key::DEFAULT_BACKFILL_SUFFIX;
use ordo_harness::keys::Records;
use ordo_harness::tick::GROUP;
use ordo_redis::PartitionAdmin;

/// One line per key of `keys`: its partition's lease (holder, token, time
/// left), stream length, and the handler's consumer group (pending
/// entries, last delivered id, lag); then one line per halted partition
/// and parked key.
pub(crate) async fn describe(client: &Pool, records: &Records, keys: &[String]) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    for key in keys {
        let lease_key = records.lease(key);
        let lease: Option<String> = client.get(&lease_key).await?;
        // A lease lives as long as its holder's member key.
        let member = lease
            .as_deref()
            .and_then(ordo_redis::internals::names::lease_member)
            .unwrap_or_default();
        let ttl: i64 = client.pttl(&member).await?;
        let partition = records.partition(key);
        let stream = partition.primary();
        let length: u64 = client.xlen(stream).await?;
        let groups: Vec<HashMap<String, Value>> = client.xinfo_groups(stream).await.unwrap_or_default();
        let group = groups
            .iter()
            .find(|g| g.get("name").and_then(Value::as_string).as_deref() == Some(GROUP))
            .map_or_else(|| "no consumer group".to_owned(), describe_group);
        lines.push(format!(
            "{key}: lease {} (its member's pttl {ttl} ms); stream {stream} length {length}; group {GROUP}: {group}",
            lease.as_deref().unwrap_or("none"),
        ));
    }
    for halted in admin(client, records).halted().await? {
        lines.push(format!(
            "{}: {halted:?}",
            if halted.parked { "parked" } else { "halted" }
        ));
    }
    Ok(lines)
}

/// The operator's view of the run's partitions, knowing how the category
/// is routed (so parked keys of hashed partitions are listed by key).
pub(crate) fn admin(client: &Pool, records: &Records) -> PartitionAdmin {
    PartitionAdmin::new(client.clone(), DEFAULT_BACKFILL_SUFFIX).with_routing(records.routing().clone())
}

/// What [`resolve`] retried.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// Halted partitions (a partition per key).
    pub(crate) partitions: u64,
    /// Parked keys (of hashed partitions).
    pub(crate) parked_keys: u64,
}

/// Retries every halted partition and parked key of the run, as an
/// operator would once the cause is gone (a chaos run's handlers fail only
/// while Redis is unreachable): the head that halted runs again, then the
/// rest in order. Each is resolved against the head it was listed with, so
/// a halt that moved on meanwhile is left alone. Returns the lines to log
/// and what was retried.
pub(crate) async fn resolve(client: &Pool, records: &Records) -> Result<(Vec<String>, Resolved)> {
    let admin = admin(client, records);
    let mut lines = Vec::new();
    let mut resolved = Resolved::default();
    for halted in admin.halted().await? {
        let outcome = admin
            .head(&halted.group, &halted.category, &halted.key)
            .expecting(&halted.head)
            .retry()
            .await;
        let what = if halted.parked {
            "parked key"
        } else {
            "halted partition"
        };
        match outcome {
            Ok(_) => {
                if halted.parked {
                    resolved.parked_keys += 1;
                } else {
                    resolved.partitions += 1;
                }
                lines.push(format!(
                    "retried {what} {} of {} at head {} ({} attempts: {})",
                    halted.key, halted.group, halted.head, halted.attempts, halted.error
                ));
            }
            Err(error) => lines.push(format!(
                "could not retry {what} {} of {}: {error}",
                halted.key, halted.group
            )),
        }
    }
    Ok((lines, resolved))
}

/// `pending`, `last-delivered-id`, `entries-read` and `lag` of one group.
fn describe_group(group: &HashMap<String, Value>) -> String {
    ["pending", "last-delivered-id", "entries-read", "lag"]
        .iter()
        .map(|field| {
            let value = group
                .get(*field)
                .and_then(Value::as_string)
                .unwrap_or_else(|| "-".to_owned());
            format!("{field} {value}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use fred::interfaces::{ClientLike as _, HashesInterface as _, ListInterface as _};
    use ordo_core::contract::broker::{Broker as _, Publication};
    use ordo_core::contract::key::Lane;
    use ordo_harness::tick::Tick;
    use ordo_harness::worker::WorkerOptions;
    use ordo_redis::{RedisBroker, Routing};
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// A poison key of a hashed partition parks (the partition's other key
    /// flows); `resolve` finds it through the admin with the routing, by its
    /// real key, and retries it: the poison runs again and parks again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn resolve_retries_the_parked_keys_of_hashed_partitions() -> anyhow::Result<()> {
        let redis = tokio::task::spawn_blocking(ordo_testkit::Redis::start_local).await??;
        let mut options = WorkerOptions::new(redis.url(), "w1");
        options.hashed_partitions = NonZeroU32::new(1);
        options.max_retries = 0;
        let config = options.config()?;
        let records = Records::new(Routing::new(&config));
        let broker = RedisBroker::builder(redis.url()).config(config).build().await?;
        let publish = |ticks: &[(&str, u64, bool)]| {
            let mut publications = Vec::new();
            for &(key, seq, poison) in ticks {
                let tick = Tick {
                    key: key.to_owned(),
                    seq,
                    poison,
                    work_ms: 0,
                    linger_ms: 0,
                };
                let mut envelope = ordo::contract::message::Envelope::new(&tick)?;
                envelope.partition_key = Some(key.to_owned());
                publications.push(Publication::to_partition(key, Lane::Primary, envelope));
            }
            anyhow::Ok(publications)
        };
        broker
            .publish(&publish(&[("bad", 0, true), ("good", 0, false)])?)
            .await?;
        let shutdown = CancellationToken::new();
        let worker = tokio::spawn({
            let (options, shutdown) = (options.clone(), shutdown.clone());
            async move { ordo_harness::worker::run(&options, shutdown).await }
        });

        let client = broker.client().clone();
        // The poison key parked after `runs` runs, the other key's first
        // `good` events applied.
        let parked = |runs: u64, good: u64| {
            let (client, records) = (client.clone(), records.clone());
            move || {
                let (client, records) = (client.clone(), records.clone());
                async move {
                    let halted = admin(&client, &records).halted().await?;
                    let applied: u64 = client.llen(records.applied("good")).await?;
                    let starts: Option<u64> = client.hget(records.starts("bad"), "0").await?;
                    Ok(applied == good
                        && starts == Some(runs)
                        && matches!(halted.as_slice(), [one] if one.parked && one.key == "bad"))
                }
            }
        };
        ordo_testkit::eventually(Duration::from_secs(20), "the poison key parked", parked(1, 1)).await?;

        let (lines, resolved) = resolve(&client, &records).await?;
        assert_eq!(
            resolved,
            Resolved {
                partitions: 0,
                parked_keys: 1
            }
        );
        assert!(
            lines[0].starts_with("retried parked key bad of TickRecorder"),
            "{lines:?}"
        );
        // The owner notices the resolution on its next read: a message of
        // the partition's other key brings one (the owner does not poll
        // for a key that parked while its reader was already waiting).
        broker.publish(&publish(&[("good", 1, false)])?).await?;
        ordo_testkit::eventually(
            Duration::from_secs(20),
            "the retried poison parked again",
            parked(2, 2),
        )
        .await?;

        shutdown.cancel();
        worker.await??;
        client.quit().await?;
        Ok(())
    }
}

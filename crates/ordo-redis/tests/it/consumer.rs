//! The partition consumer end to end, against a real Redis: ordering, fair
//! share, hand-over, lanes, process managers, reaping, idle cost, restarts.
//! (Crash and stall properties with real processes are in their own tests.)

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use fred::clients::Pool;
use fred::interfaces::{ClientLike, KeysInterface, SetsInterface, StreamsInterface};
use ordo_core::contract::broker::Broker;
use ordo_core::contract::handler::HandlerKind;
use ordo_core::contract::key::Lane;
use ordo_redis::PartitionKeys;
use ordo_testkit::{Redis, RedisCluster};

use common::topology::TestRedis;
use common::{
    Outcome, Recorder, Running, broker, config, envelope, keys, pool, publication, publish_all, publish_seqs,
    subscribe, subscription,
};
use ordo_testkit::eventually;

/// Who holds `group`'s lease on each of `keys` (instance ids).
async fn owners(
    client: &Pool,
    category: &str,
    keys: &[String],
    group: &str,
) -> anyhow::Result<Vec<Option<String>>> {
    let mut owners = Vec::new();
    for key in keys {
        let lease = PartitionKeys::new(category, key, "backfill").lease(group).lease;
        let value: Option<String> = client.get(lease).await?;
        owners.push(value.map(|v| v.rsplit_once(':').map(|(i, _)| i.to_owned()).unwrap_or(v)));
    }
    Ok(owners)
}

fn count_by_owner(owners: &[Option<String>]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for owner in owners.iter().flatten() {
        *counts.entry(owner.clone()).or_default() += 1;
    }
    counts
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    two_instances_split_the_partitions_and_keep_each_key_in_order
);

async fn two_instances_split_the_partitions_and_keep_each_key_in_order(
    redis: TestRedis,
) -> anyhow::Result<()> {
    common::logs();
    let url = redis.url();
    let category = common::category("order");
    let keys = keys(8);
    let recorder = Recorder::with(Arc::new(|_, _, _| Outcome::Slow(Duration::from_millis(2))));
    let sub = || subscribe::partitioned("Projector", &category, &recorder);
    let a = broker(&url, config(3_000, 3_600_000, 0)).await?;
    let b = broker(&url, config(3_000, 3_600_000, 0)).await?;
    publish_all(&a, &category, &keys, 0..30).await?;

    let run_a = Running::start(&a, vec![sub()]);
    let run_b = Running::start(&b, vec![sub()]);
    recorder
        .until(Duration::from_secs(30), "every message handled", |r| {
            r.handled().len() >= 8 * 30
        })
        .await?;
    let client = pool(&url).await?;
    eventually(Duration::from_secs(10), "an even split of the leases", || {
        let (client, category, keys) = (client.clone(), category.clone(), keys.clone());
        async move {
            let counts = count_by_owner(&owners(&client, &category, &keys, "Projector").await?);
            Ok(counts.len() == 2 && counts.values().all(|c| *c == 4))
        }
    })
    .await?;
    for key in &keys {
        assert_eq!(
            recorder.seqs(key),
            (0..30).collect::<Vec<_>>(),
            "key {key} in publish order, once each"
        );
    }
    assert!(
        recorder.overlaps().is_empty(),
        "same-key overlaps: {:?}",
        recorder.overlaps()
    );
    run_a.stop().await?;
    run_b.stop().await?;
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_worker_trims_what_it_acknowledged
);

/// The worker trims its lane with the last acknowledgement of each read
/// batch (not after every message): once everything is handled, the lane
/// is empty (an idle partition keeps no entry, nor the 4 KB stream node
/// that held it, in Redis) and still shows its last id.
async fn a_worker_trims_what_it_acknowledged(redis: TestRedis) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("trim");
    let recorder = Recorder::new();
    let broker = broker(&url, config(3_000, 3_600_000, 0)).await?;
    // Three read batches of 64 and a partial one.
    publish_seqs(&broker, &category, "k", 0..200).await?;
    let run = Running::start(
        &broker,
        vec![subscribe::partitioned("Projector", &category, &recorder)],
    );
    recorder.wait_seqs("k", &(0..200).collect::<Vec<_>>()).await?;
    let client = pool(&url).await?;
    let lane = PartitionKeys::new(&category, "k", "backfill")
        .primary()
        .to_owned();
    eventually(Duration::from_secs(10), "the lane trimmed empty", || {
        let (client, lane) = (client.clone(), lane.clone());
        async move { Ok(client.xlen::<u64, _>(&lane).await? == 0) }
    })
    .await?;
    let info: BTreeMap<String, fred::types::Value> = client.xinfo_stream(&lane, false, None).await?;
    let last = info
        .get("last-generated-id")
        .and_then(fred::types::Value::as_string);
    let added = info.get("entries-added").and_then(fred::types::Value::as_u64);
    assert!(
        last.is_some_and(|last| last != "0-0") && added == Some(200),
        "the emptied lane keeps its last id and count: {info:?}"
    );
    run.stop().await?;
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    an_idle_partition_keeps_no_consumer_in_its_group
);

/// A worker that waits on a drained partition's doorbell drops its group's
/// consumer from the lane (Redis memory per idle partition and group); its
/// next read, woken by a publish, makes it again.
async fn an_idle_partition_keeps_no_consumer_in_its_group(redis: TestRedis) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("idle");
    let recorder = Recorder::new();
    let broker = broker(&url, config(3_000, 3_600_000, 0)).await?;
    publish_seqs(&broker, &category, "k", 0..3).await?;
    let run = Running::start(
        &broker,
        vec![subscribe::partitioned("Projector", &category, &recorder)],
    );
    let client = pool(&url).await?;
    let lane = PartitionKeys::new(&category, "k", "backfill")
        .primary()
        .to_owned();
    let no_consumer = || {
        let (client, lane) = (client.clone(), lane.clone());
        async move {
            let consumers: Vec<fred::types::Value> = client.xinfo_consumers(&lane, "Projector").await?;
            Ok(consumers.is_empty())
        }
    };
    for round in 1..=2u64 {
        recorder
            .wait_seqs("k", &(0..2 + round).collect::<Vec<_>>())
            .await?;
        eventually(
            Duration::from_secs(10),
            "the idle lane without a consumer",
            no_consumer,
        )
        .await?;
        publish_seqs(&broker, &category, "k", 2 + round..3 + round).await?;
    }
    recorder.wait_seqs("k", &[0, 1, 2, 3, 4]).await?;
    run.stop().await?;
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_publish_rings_the_doorbell_of_its_idle_partition
);

/// An idle worker is woken by the publish itself, never by polling: the
/// fallback poll and the re-check are set to a minute, so a lost wake-up
/// fails the test. Each
/// round publishes as soon as the previous one was handled, while the
/// workers are turning idle and arming their doorbells again (the race the
/// arming script closes).
async fn a_publish_rings_the_doorbell_of_its_idle_partition(redis: TestRedis) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("order");
    let keys = keys(4);
    let config = ordo_core::contract::config::Config::from_toml_str(
        "[server.partitioning]\n\
         lease_ttl_ms = 3000\n\
         heartbeat_interval_seconds = 0.6\n\
         poll_interval_seconds = 60\n\
         discovery_interval_seconds = 0.1\n\
         recheck_interval_seconds = 60\n",
    )?;
    let a = broker(&url, config).await?;
    publish_all(&a, &category, &keys, 0..1).await?;
    let recorder = Recorder::new();
    let run = Running::start(
        &a,
        vec![subscription(
            "P",
            HandlerKind::Event,
            &[&category],
            true,
            Arc::new(recorder.clone()),
        )],
    );
    let handled = |n: usize| {
        let recorder = recorder.clone();
        async move { Ok(recorder.handled().len() >= n) }
    };
    eventually(Duration::from_secs(30), "the first entries handled", || {
        handled(keys.len())
    })
    .await?;
    let client = pool(&url).await?;
    doorbells_armed(&client, &category, &keys).await?;
    for round in 1..=20u64 {
        publish_all(&a, &category, &keys, round..round + 1).await?;
        let expected = keys.len() * usize::try_from(round + 1)?;
        eventually(
            Duration::from_secs(10),
            "the round's entries handled (by a ring, not a poll)",
            || handled(expected),
        )
        .await?;
    }
    for key in &keys {
        assert_eq!(
            recorder.seqs(key),
            (0..=20).collect::<Vec<_>>(),
            "key {key} in order, once each"
        );
    }
    run.stop().await?;
    Ok(())
}

/// Timings for the wake-up tests: no polling (a minute), a re-check every
/// 0.5 s, nothing retired.
fn no_polling_recheck_every_half_second() -> anyhow::Result<ordo_core::contract::config::Config> {
    Ok(ordo_core::contract::config::Config::from_toml_str(
        "[server.partitioning]\n\
         lease_ttl_ms = 3000\n\
         heartbeat_interval_seconds = 0.6\n\
         poll_interval_seconds = 60\n\
         discovery_interval_seconds = 0.1\n\
         recheck_interval_seconds = 0.5\n",
    )?)
}

/// Waits until the doorbell of every one of `keys`' partitions is armed:
/// their workers wait for a ring.
async fn doorbells_armed(client: &Pool, category: &str, keys: &[String]) -> anyhow::Result<()> {
    eventually(
        Duration::from_secs(15),
        "every idle partition's doorbell armed",
        || {
            let (client, category, keys) = (client.clone(), category.to_owned(), keys.to_vec());
            async move {
                for key in &keys {
                    let doorbell = PartitionKeys::new(&category, key, "backfill").doorbell();
                    if client.exists::<u64, _>(doorbell).await? == 0 {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
        },
    )
    .await?;
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    an_entry_added_without_the_publish_script_is_handled_within_the_recheck_interval
);

/// An entry added to an idle partition's stream without Ordo's publish
/// script (an `XADD` by hand, a replay tool) rings no doorbell: it used to
/// wait for the next real publish to the key (or the reap timer, an hour by
/// default). The re-check finds it within its interval (0.5 s here; the
/// test allows 20 times that).
async fn an_entry_added_without_the_publish_script_is_handled_within_the_recheck_interval(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("handmade");
    let keys = keys(3);
    let a = broker(&url, no_polling_recheck_every_half_second()?).await?;
    publish_all(&a, &category, &keys, 0..1).await?;
    let recorder = Recorder::new();
    let run = Running::start(&a, vec![subscribe::partitioned("P", &category, &recorder)]);
    recorder
        .until(Duration::from_secs(30), "the first entries handled", |r| {
            r.handled().len() >= keys.len()
        })
        .await?;
    let client = pool(&url).await?;
    doorbells_armed(&client, &category, &keys).await?;

    // What `publish.lua` writes, added by hand.
    let by_hand = envelope(&category, "Happened", Some(&keys[1]), 1);
    let _: String = client
        .xadd(
            common::stream(&category, &keys[1]),
            false,
            None,
            "*",
            vec![
                ("type", "Happened".to_owned()),
                ("envelope", serde_json::to_string(&by_hand)?),
            ],
        )
        .await?;
    let started = std::time::Instant::now();
    recorder.wait_seqs(&keys[1], &[0, 1]).await?;
    eprintln!("an entry added by hand was handled after {:?}", started.elapsed());
    run.stop().await?;
    Ok(())
}

/// Partitions idle on every primary of a cluster with replicas while one
/// primary hands its slots to its replica (`CLUSTER FAILOVER`, which loses
/// nothing). Redis drops the waker's sharded subscriptions of those slots
/// (it sends `sunsubscribe`, which the client library drops silently): a
/// publish to such a partition then deleted the armed doorbell and rang
/// nobody, and its worker waited for the reap timer. The re-check finds the
/// subscriptions on the wrong node and subscribes again, and finds any
/// doorbell rung meanwhile: every key's next entry is handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_partitions_are_woken_after_a_manual_cluster_failover() -> anyhow::Result<()> {
    let mut cluster = RedisCluster::builder().replicas(true).start()?;
    let url = cluster.url();
    let category = common::category("failover");
    let keys = keys(24);
    let a = broker(&url, no_polling_recheck_every_half_second()?).await?;
    publish_all(&a, &category, &keys, 0..1).await?;
    let recorder = Recorder::new();
    let run = Running::start(&a, vec![subscribe::partitioned("P", &category, &recorder)]);
    recorder
        .until(Duration::from_secs(30), "the first entries handled", |r| {
            r.handled().len() >= keys.len()
        })
        .await?;
    let client = pool(&url).await?;
    doorbells_armed(&client, &category, &keys).await?;

    let primary = cluster.node_for_key(&common::stream(&category, &keys[0]))?;
    let replica = *cluster
        .replicas_of(primary)?
        .first()
        .context("the primary has a replica")?;
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.failover(replica)?;
        anyhow::Ok(cluster)
    })
    .await??;
    let moved: Vec<&String> = keys
        .iter()
        .filter(|key| {
            cluster
                .node_for_key(&common::stream(&category, key))
                .is_ok_and(|node| node == replica)
        })
        .collect();
    assert!(!moved.is_empty(), "the failover moved some keys' partitions");

    publish_all(&a, &category, &keys, 1..2).await?;
    let started = std::time::Instant::now();
    recorder
        .until(
            Duration::from_secs(20),
            "every key's entry published after the failover handled",
            |r| r.handled().len() >= 2 * keys.len(),
        )
        .await
        .with_context(|| {
            let missing: Vec<&String> = keys.iter().filter(|key| recorder.seqs(key) != [0, 1]).collect();
            format!("not handled: {missing:?} (on the failed-over primary: {moved:?})")
        })?;
    eprintln!(
        "after the failover ({} of {} partitions on the promoted replica), every key's next entry \
         was handled within {:?}",
        moved.len(),
        keys.len(),
        started.elapsed()
    );
    for key in &keys {
        assert_eq!(recorder.seqs(key), [0, 1], "{key} once each, in order");
    }

    // The waker listens on the promoted node again (it is the only
    // subscriber here): later publishes ring, whatever the re-check.
    let promoted =
        ordo_redis::client_config(&format!("redis://127.0.0.1:{}", cluster.node(replica)?.port()))?;
    let promoted = fred::prelude::Builder::from_config(promoted).build()?;
    promoted.init().await?;
    let channels: Vec<String> = moved
        .iter()
        .map(|key| PartitionKeys::new(&category, key, "backfill").doorbell_channel())
        .collect();
    eventually(
        Duration::from_secs(10),
        "the waker subscribed to the moved doorbell channels on the promoted node",
        || {
            let (promoted, channels) = (promoted.clone(), channels.clone());
            let expected = 2 * channels.len();
            async move {
                let counts: Vec<fred::types::Value> =
                    fred::interfaces::PubsubInterface::pubsub_shardnumsub(&promoted, channels).await?;
                Ok(counts.len() == expected
                    && counts
                        .chunks(2)
                        .all(|pair| pair.get(1).and_then(fred::types::Value::as_u64) >= Some(1)))
            }
        },
    )
    .await?;
    run.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_instance_gets_its_share_and_a_leaving_one_hands_over_at_once() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("order");
    let keys = keys(9);
    let recorder = Recorder::new();
    let sub = || subscribe::partitioned("Projector", &category, &recorder);
    // A long TTL: hand-over must not wait for it.
    let cfg = || config(30_000, 3_600_000, 0);
    let a = broker(&url, cfg()).await?;
    publish_all(&a, &category, &keys, 0..1).await?;
    let client = pool(&url).await?;
    let split = |expected: Vec<usize>| {
        let (client, category, keys) = (client.clone(), category.clone(), keys.clone());
        async move {
            let mut counts: Vec<usize> =
                count_by_owner(&owners(&client, &category, &keys, "Projector").await?)
                    .into_values()
                    .collect();
            counts.sort_unstable();
            Ok(counts == expected)
        }
    };

    let run_a = Running::start(&a, vec![sub()]);
    eventually(Duration::from_secs(10), "a owning all 9", || split(vec![9])).await?;
    let b = broker(&url, cfg()).await?;
    let run_b = Running::start(&b, vec![sub()]);
    eventually(Duration::from_secs(10), "a 4/5 split", || split(vec![4, 5])).await?;
    let c = broker(&url, cfg()).await?;
    let run_c = Running::start(&c, vec![sub()]);
    eventually(Duration::from_secs(10), "a 3/3/3 split", || split(vec![3, 3, 3])).await?;

    // C leaves: its leases are released, so A and B take them well within the TTL.
    let left = std::time::Instant::now();
    run_c.stop().await?;
    eventually(Duration::from_secs(10), "a 4/5 split without c", || {
        split(vec![4, 5])
    })
    .await?;
    assert!(
        left.elapsed() < Duration::from_secs(15),
        "hand-over waited for the TTL: {:?}",
        left.elapsed()
    );
    publish_all(&a, &category, &keys, 1..2).await?;
    recorder
        .until(Duration::from_secs(10), "the new messages handled", |r| {
            r.handled().len() >= 18
        })
        .await?;
    assert!(recorder.overlaps().is_empty());
    run_a.stop().await?;
    run_b.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primary_lane_drains_before_the_backfill_lane() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("order");
    // Backfill messages are slow, so a primary message published meanwhile
    // must overtake the remaining backfill ones.
    let recorder = Recorder::with(Arc::new(|_, seq, _| {
        if seq >= 100 {
            Outcome::Slow(Duration::from_millis(100))
        } else {
            Outcome::Succeed
        }
    }));
    let a = broker(&url, config(3_000, 3_600_000, 0)).await?;
    let mut publications: Vec<_> = (100..106)
        .map(|s| publication(&category, "k", s, Lane::Backfill))
        .collect();
    publications.extend((0..3).map(|s| publication(&category, "k", s, Lane::Primary)));
    a.publish(&publications).await?;

    let run = Running::start(&a, vec![subscribe::partitioned("P", &category, &recorder)]);
    recorder
        .until(Duration::from_secs(10), "the first backfill message", |r| {
            r.seqs("k").contains(&100)
        })
        .await?;
    a.publish(&[publication(&category, "k", 3, Lane::Primary)])
        .await?;
    recorder
        .until(Duration::from_secs(10), "every message", |r| {
            r.seqs("k").len() == 10
        })
        .await?;
    let seqs = recorder.seqs("k");
    assert_eq!(&seqs[..4], &[0, 1, 2, 100], "primary first: {seqs:?}");
    let late = seqs.iter().position(|s| *s == 3).expect("handled");
    assert!(
        late < 9,
        "the late primary message overtook the remaining backfill: {seqs:?}"
    );
    let backfill: Vec<u64> = seqs.iter().copied().filter(|s| *s >= 100).collect();
    assert_eq!(backfill, (100..106).collect::<Vec<_>>(), "backfill in order");
    run.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_manager_owns_each_correlation_value_across_categories() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let orders = common::category("order");
    let payments = common::category("payment");
    let recorder = Recorder::with(Arc::new(|_, _, _| Outcome::Slow(Duration::from_millis(3))));
    let sub = || {
        subscription(
            "Fulfilment",
            HandlerKind::ProcessManager,
            &[&orders, &payments],
            true,
            Arc::new(recorder.clone()),
        )
    };
    let a = broker(&url, config(3_000, 3_600_000, 0)).await?;
    let b = broker(&url, config(3_000, 3_600_000, 0)).await?;
    let values = keys(4);
    let mut publications = Vec::new();
    for seq in 0..10 {
        for value in &values {
            publications.push(publication(&orders, value, seq, Lane::Primary));
            publications.push(publication(&payments, value, 100 + seq, Lane::Primary));
        }
    }
    a.publish(&publications).await?;
    let run_a = Running::start(&a, vec![sub()]);
    let run_b = Running::start(&b, vec![sub()]);
    recorder
        .until(Duration::from_secs(30), "every message", |r| {
            r.handled().len() >= 80
        })
        .await?;
    assert!(
        recorder.overlaps().is_empty(),
        "one correlation value ran twice at once: {:?}",
        recorder.overlaps()
    );
    for value in &values {
        let seqs = recorder.seqs(value);
        let order: Vec<u64> = seqs.iter().copied().filter(|s| *s < 100).collect();
        let payment: Vec<u64> = seqs.iter().copied().filter(|s| *s >= 100).collect();
        assert_eq!(order, (0..10).collect::<Vec<_>>());
        assert_eq!(payment, (100..110).collect::<Vec<_>>());
    }
    // One lease per value, none per partition.
    let client = pool(&url).await?;
    assert!(
        client
            .exists::<bool, _>(format!("{{__pm__:Fulfilment:{}}}:lease:Fulfilment", values[0]))
            .await?
    );
    assert!(
        !client
            .exists::<bool, _>(
                PartitionKeys::new(&orders, &values[0], "backfill")
                    .lease("Fulfilment")
                    .lease
            )
            .await?
    );
    run_a.stop().await?;
    run_b.stop().await?;
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_cold_partition_is_retired_and_a_later_publish_brings_it_back
);

async fn a_cold_partition_is_retired_and_a_later_publish_brings_it_back(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("order");
    let recorder = Recorder::new();
    let a = broker(&url, config(3_000, 400, 0)).await?;
    let run = Running::start(&a, vec![subscribe::partitioned("P", &category, &recorder)]);
    a.publish(&[
        publication(&category, "k", 0, Lane::Primary),
        publication(&category, "k", 1, Lane::Backfill),
    ])
    .await?;
    let client = pool(&url).await?;
    let partition = PartitionKeys::new(&category, "k", "backfill");
    let index = partition.index();
    let pattern = format!("*{category}:k*");
    let retired = eventually(Duration::from_secs(10), "the partition retired", || {
        let (client, index, pattern) = (client.clone(), index.clone(), pattern.clone());
        async move {
            let members: Vec<String> = client.smembers(&index).await?;
            let keys: Vec<String> = client.next().custom(fred::cmd!("KEYS"), vec![pattern]).await?;
            Ok(members.is_empty() && keys.is_empty())
        }
    })
    .await;
    if let Err(error) = retired {
        let left: Vec<String> = client.next().custom(fred::cmd!("KEYS"), vec![pattern]).await?;
        anyhow::bail!("{error}; left behind: {left:?}");
    }
    assert_eq!(recorder.seqs("k"), [0, 1]);
    // Discovery is told: the publish that indexed the partition, then the
    // reap that removed it, incremented the index version.
    let version_key = ordo_redis::internals::names::index_version(&category);
    eventually(Duration::from_secs(10), "the reap said so", || {
        let (client, key) = (client.clone(), version_key.clone());
        async move { Ok(client.get::<Option<i64>, _>(key).await? == Some(2)) }
    })
    .await?;

    a.publish(&[publication(&category, "k", 2, Lane::Primary)])
        .await?;
    assert_eq!(client.get::<Option<i64>, _>(&version_key).await?, Some(3));
    recorder.wait_seqs("k", &[0, 1, 2]).await?;
    run.stop().await?;
    Ok(())
}

/// Discovery reads a category's index again only when its version says it
/// changed, and every tenth round anyway: an idle system's rounds cost the
/// same whatever its number of partitions. A partition whose publisher
/// never said so (the increment lost) is found by that periodic read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_reads_the_index_again_only_when_it_changed() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let url = redis.url();
    let category = common::category("order");
    let config = ordo_core::contract::config::Config::from_toml_str(
        "[server.partitioning]\n\
         lease_ttl_ms = 3000\n\
         heartbeat_interval_seconds = 0.6\n\
         discovery_interval_seconds = 0.1\n",
    )?;
    let a = broker(&url, config).await?;
    let keys = keys(3);
    publish_all(&a, &category, &keys, 0..1).await?;
    let recorder = Recorder::new();
    let run = Running::start(&a, vec![subscribe::partitioned("P", &category, &recorder)]);
    recorder
        .until(Duration::from_secs(30), "every partition drained", |r| {
            r.handled().len() >= 3
        })
        .await?;
    let client = pool(&url).await?;
    // Every round checks the group's registration (one `SISMEMBER`); a
    // read of the index on a single Redis is one `SUNION` here.
    let count = |command: &'static str| {
        let client = client.clone();
        async move { common::command_stat(&client, command, "calls").await }
    };
    let (rounds_before, reads_before) = (count("sismember").await?, count("sunion").await?);
    eventually(Duration::from_secs(30), "30 discovery rounds", || async move {
        Ok(count("sismember").await? >= rounds_before + 30)
    })
    .await?;
    let rounds = count("sismember").await? - rounds_before;
    let reads = count("sunion").await? - reads_before;
    assert!(
        (2..=rounds / 5).contains(&reads),
        "{reads} reads of the unchanged index in {rounds} rounds: \
         expected one every tenth round"
    );

    // A partition published while its increment is lost.
    let version_key = ordo_redis::internals::names::index_version(&category);
    let version: Option<i64> = client.get(&version_key).await?;
    publish_all(&a, &category, &["late".to_owned()], 0..1).await?;
    match version {
        Some(version) => {
            client
                .set::<(), _, _>(&version_key, version, None, None, false)
                .await?
        }
        None => client.del::<(), _>(&version_key).await?,
    }
    recorder.wait_seqs("late", &[0]).await?;
    run.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_cost_does_not_grow_with_owned_partitions() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let url = redis.url();
    let category = common::category("order");
    // The default timings of the contract.
    let a = broker(&url, ordo_core::contract::config::Config::default()).await?;
    let keys = keys(500);
    publish_all(&a, &category, &keys, 0..1).await?;
    let recorder = Recorder::new();
    let run = Running::start(&a, vec![subscribe::partitioned("P", &category, &recorder)]);
    recorder
        .until(Duration::from_secs(60), "every partition drained", |r| {
            r.handled().len() >= 500
        })
        .await?;
    let client = pool(&url).await?;
    // Let the last acknowledgements settle, then count the commands clients
    // send while idle (scripts count once: the commands a script runs inside
    // Redis are not round trips).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = client_commands(&client).await?;
    let window = Duration::from_secs(6);
    tokio::time::sleep(window).await;
    let after = client_commands(&client).await?;
    // The INFO call that took `before` is part of the count.
    let per_second = (after - before - 1) as f64 / window.as_secs_f64();
    eprintln!("idle: {per_second:.1} client commands/s for 500 owned partitions");
    assert!(
        per_second <= 50.0,
        "{per_second} commands/s for 500 idle partitions"
    );
    run.stop().await?;
    Ok(())
}

/// Calls of the commands clients send directly (never from inside a script):
/// scripts, blocking reads, discovery, pings and this INFO itself.
async fn client_commands(client: &Pool) -> anyhow::Result<u64> {
    let info: String = client.info(Some(fred::types::InfoKind::CommandStats)).await?;
    let direct = [
        "fcall",
        "eval",
        "xread",
        "smembers",
        "sunion",
        "sadd",
        "ping",
        "client|unblock",
        "zrem",
        "info",
    ];
    let mut calls = 0;
    for line in info.lines() {
        let Some((name, stats)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else {
            continue;
        };
        if direct.contains(&name) {
            let count = stats
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))
                .and_then(|c| c.parse::<u64>().ok())
                .ok_or_else(|| anyhow::anyhow!("no calls in {line}"))?;
            calls += count;
        }
    }
    Ok(calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_survives_a_redis_restart() -> anyhow::Result<()> {
    let mut redis = Redis::builder().append_only(true).start()?;
    let url = redis.url();
    let category = common::category("order");
    let recorder = Recorder::new();
    let a = broker(&url, config(2_000, 3_600_000, 0)).await?;
    let run = Running::start(&a, vec![subscribe::partitioned("P", &category, &recorder)]);
    a.publish(&[publication(&category, "k", 0, Lane::Primary)])
        .await?;
    recorder.wait_seqs("k", &[0]).await?;
    redis.restart()?;
    // Publishing retries through the reconnect.
    let mut published = false;
    for _ in 0..50 {
        if a.publish(&[publication(&category, "k", 1, Lane::Primary)])
            .await
            .is_ok()
        {
            published = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(published, "publishing works again after the restart");
    recorder
        .until(
            Duration::from_secs(20),
            "the message published after the restart",
            |r| r.seqs("k").ends_with(&[1]),
        )
        .await?;
    let seqs = recorder.seqs("k");
    assert_eq!(seqs.first(), Some(&0));
    run.stop().await?;
    Ok(())
}

/// LESSONS.md item 7: handlers on the heartbeat's event loop starved it. Here
/// a handler that blocks its runtime thread for longer than the lease TTL
/// does not lose the lease: the other instance never takes over, and the
/// message runs once. One runtime thread, so the blocked handler stalls
/// everything on the runtime: only the heartbeat's own thread keeps going.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_handler_blocking_longer_than_the_lease_does_not_lose_it() -> anyhow::Result<()> {
    common::logs();
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("order");
    let ttl_ms = 1_000;
    let recorder = Recorder::with(Arc::new(|_, seq, _| {
        if seq == 0 {
            Outcome::Block(Duration::from_millis(2_500))
        } else {
            Outcome::Succeed
        }
    }));
    let sub = || subscribe::partitioned("P", &category, &recorder);
    let a = broker(&url, config(ttl_ms, 3_600_000, 0)).await?;
    publish_seqs(&a, &category, "k", 0..3).await?;
    let run_a = Running::start(&a, vec![sub()]);
    recorder
        .until(
            Duration::from_secs(10),
            "the slow message to start",
            Recorder::started,
        )
        .await?;
    let b = broker(&url, config(ttl_ms, 3_600_000, 0)).await?;
    let run_b = Running::start(&b, vec![sub()]);
    recorder
        .until(Duration::from_secs(10), "every message", |r| {
            r.seqs("k").len() == 3
        })
        .await?;
    assert_eq!(recorder.seqs("k"), [0, 1, 2]);
    let attempts = recorder.attempts("k", 0);
    assert_eq!(
        attempts,
        Some(1),
        "the slow message ran once: its lease was never lost"
    );
    assert!(recorder.overlaps().is_empty());
    let tokens: std::collections::BTreeSet<u64> = recorder.handled().iter().map(|(_, _, t)| *t).collect();
    assert_eq!(tokens.len(), 1, "one owner handled everything: {tokens:?}");
    run_a.stop().await?;
    run_b.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_broker_runs_one_consumer_at_a_time() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let a = broker(&redis.url(), config(3_000, 3_600_000, 0)).await?;
    let category = common::category("order");
    let recorder = Recorder::new();
    let sub = || subscribe::partitioned("P", &category, &recorder);
    let first = Running::start(&a, vec![sub()]);
    a.publish(&[publication(&category, "k", 0, Lane::Primary)])
        .await?;
    recorder.wait_seqs("k", &[0]).await?;
    // Already cancelled: were it (wrongly) accepted, it would stop at once.
    let cancelled = tokio_util::sync::CancellationToken::new();
    cancelled.cancel();
    let second = tokio::time::timeout(Duration::from_secs(10), a.run(vec![sub()].into(), cancelled)).await?;
    let error = second.expect_err("a second consumer of one instance is refused");
    assert!(matches!(
        error.downcast_ref::<ordo_redis::Error>(),
        Some(ordo_redis::Error::AlreadyRunning { .. })
    ));
    first.stop().await?;
    Ok(())
}

/// With `ack_window = N`, a key's worker sends the acknowledgements of the
/// messages it ran ahead in one call per half window, one `XACK` of their
/// ids (not one call and one `XACK` per message), and still handles every
/// message once, in order; with a window smaller than the read batch the
/// halves keep going out while it runs the next messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_acknowledgement_window_a_key_s_acknowledgements_travel_together() -> anyhow::Result<()> {
    use ordo_core::contract::broker::HandlerSettings;
    use ordo_core::contract::config::HandlerConfig;

    let redis = Redis::start()?;
    let url = redis.url();
    let client = pool(&url).await?;
    for (window, most_xacks) in [(64u32, 2u64), (8, 16)] {
        let category = common::category("window");
        let recorder = Recorder::new();
        let broker = broker(&url, config(3_000, 3_600_000, 0)).await?;
        // One read batch (64, the default) of one key.
        publish_seqs(&broker, &category, "k", 0..64).await?;
        let mut subscription = subscribe::partitioned("Projector", &category, &recorder);
        subscription.settings = HandlerSettings::new(HandlerConfig::new().with_ack_window(window));
        let before = common::command_stat(&client, "xack", "calls").await?;
        let run = Running::start(&broker, vec![subscription]);
        recorder.wait_seqs("k", &(0..64).collect::<Vec<_>>()).await?;
        let lane = PartitionKeys::new(&category, "k", "backfill")
            .primary()
            .to_owned();
        eventually(Duration::from_secs(10), "every message acknowledged", || {
            let (client, lane) = (client.clone(), lane.clone());
            async move {
                let pending: (u64, fred::types::Value, fred::types::Value, fred::types::Value) =
                    client.xpending(&lane, "Projector", ()).await?;
                Ok(pending.0 == 0)
            }
        })
        .await?;
        let xacks = common::command_stat(&client, "xack", "calls").await? - before;
        assert!(
            (1..=most_xacks).contains(&xacks),
            "window {window}: 64 messages acknowledged with {xacks} XACK calls, expected at most {most_xacks}"
        );
        run.stop().await?;
    }
    Ok(())
}

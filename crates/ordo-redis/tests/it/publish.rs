//! Publishing, against a real Redis: stream and index together, registered
//! groups on new streams, base streams, and publishes racing reaps.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use fred::clients::Pool;
use fred::interfaces::{FunctionInterface, KeysInterface, LuaInterface, SetsInterface, StreamsInterface};
use fred::types::Value;
use ordo_core::contract::broker::{Broker, Publication};
use ordo_core::contract::key::Lane;
use ordo_redis::internals::{Partitions, ReadOutcome, ReapOutcome};
use ordo_redis::{PartitionKeys, RedisBroker};
use ordo_testkit::{Redis, RedisCluster};

use common::topology::{TestRedis, Topology};
use common::{broker, config, envelope, pool, publication};

crate::on_both_topologies!(
    #[tokio::test]
    a_publish_writes_the_stream_the_index_and_the_registered_groups
);

async fn a_publish_writes_the_stream_the_index_and_the_registered_groups(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("order");
    let a = broker(&url, config(15_000, 3_600_000, 0)).await?;
    let client = pool(&url).await?;
    ordo_redis::internals::register_group(&client, &category, "G1").await?;
    ordo_redis::internals::register_group(&client, &category, "G2").await?;

    a.publish(&[
        publication(&category, "k1", 0, Lane::Primary),
        publication(&category, "k2", 0, Lane::Backfill),
        Publication::to_base(envelope(&category, "Happened", None, 0)),
    ])
    .await?;

    // Each key in the index bucket of its own slot, which the category's
    // directory lists.
    let listed: BTreeSet<u16> = client
        .smembers(ordo_redis::internals::names::index_directory(&category))
        .await?;
    let mut indexed = BTreeSet::new();
    for key in ["k1", "k2"] {
        let slot = common::partition(&category, key).slot();
        assert!(listed.contains(&slot), "slot {slot} of {key} listed: {listed:?}");
        let bucket: BTreeSet<String> = client
            .smembers(ordo_redis::internals::names::index(&category, slot))
            .await?;
        assert!(bucket.contains(key), "{key} in its bucket: {bucket:?}");
        indexed.extend(bucket);
    }
    assert_eq!(indexed, BTreeSet::from(["k1".to_owned(), "k2".to_owned()]));
    assert_eq!(client.xlen::<u64, _>(common::stream(&category, "k1")).await?, 1);
    assert_eq!(
        client
            .xlen::<u64, _>(common::partition(&category, "k2").backfill().to_owned())
            .await?,
        1
    );
    assert_eq!(client.xlen::<u64, _>(&category).await?, 1, "the base stream");
    assert!(!client.exists::<bool, _>(common::stream(&category, "k2")).await?);
    let groups: Value = client.xinfo_groups(common::stream(&category, "k1")).await?;
    let text = format!("{groups:?}");
    assert!(
        text.contains("G1") && text.contains("G2"),
        "registered groups created: {text}"
    );
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test]
    a_publish_that_indexes_a_partition_increments_the_index_version
);

/// Discovery reads a category's index again only when its version changed:
/// a publish that adds a partition to the index increments it once; one to
/// partitions already indexed, or to the base stream, leaves it alone.
async fn a_publish_that_indexes_a_partition_increments_the_index_version(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("order");
    let a = broker(&url, config(15_000, 3_600_000, 0)).await?;
    let client = pool(&url).await?;
    let version_key = ordo_redis::internals::names::index_version(&category);
    let version = || {
        let (client, key) = (client.clone(), version_key.clone());
        async move { anyhow::Ok(client.get::<Option<i64>, _>(key).await?) }
    };
    assert_eq!(version().await?, None, "no index yet");

    a.publish(&[
        publication(&category, "k1", 0, Lane::Primary),
        publication(&category, "k1", 1, Lane::Backfill),
    ])
    .await?;
    assert_eq!(version().await?, Some(1), "k1 indexed");

    a.publish(&[
        publication(&category, "k1", 2, Lane::Primary),
        Publication::to_base(envelope(&category, "Happened", None, 0)),
    ])
    .await?;
    assert_eq!(version().await?, Some(1), "nothing indexed");

    a.publish(&[
        publication(&category, "k2", 0, Lane::Primary),
        publication(&category, "k3", 0, Lane::Primary),
        publication(&category, "k1", 3, Lane::Primary),
    ])
    .await?;
    // Once per batch (a cluster's nodes' calls each may say so).
    let after = version().await?.context("the version after k2 and k3")?;
    assert!((2..=4).contains(&after), "k2 and k3 indexed: version {after}");
    Ok(())
}

/// LESSONS.md item 5: with SADD and XADD as two steps, a reap between them
/// left a message on an unindexed stream. Here publishes race reaps of the
/// same partition; afterwards every message is either consumed or on an
/// indexed stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_racing_a_reap_never_strands_a_message() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("race");
    let partition = PartitionKeys::new(&category, "k", "backfill");
    let publisher = broker(&url, config(15_000, 3_600_000, 0)).await?;
    let owner = Partitions::new(pool(&url).await?, "reaper", Duration::from_secs(15));
    // Publishing goes on until the partition has been reaped ten times in
    // its midst (however slow the machine), up to a cap.
    const WANTED_REAPS: u64 = 10;
    const CAP: u64 = 5_000;
    let reaps = Arc::new(AtomicU64::new(0));
    let publishing = {
        let category = category.clone();
        let reaps = reaps.clone();
        tokio::spawn(async move {
            let mut seq = 0;
            while seq < CAP && reaps.load(Ordering::Relaxed) < WANTED_REAPS {
                publisher
                    .publish(&[publication(&category, "k", seq, Lane::Primary)])
                    .await?;
                seq += 1;
                // Pacing, so the partition drains (and is reaped) between publishes.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            anyhow::Ok(seq)
        })
    };
    // A watcher checks, atomically and over and over, that the stream never
    // exists without its index entry (what a two-step publish racing a reap
    // produces between its SADD and its XADD).
    let watching = {
        let client = pool(&url).await?;
        let (stream, index) = (partition.primary().to_owned(), partition.index());
        let publishing_done = publishing.abort_handle();
        tokio::spawn(async move {
            let mut checks = 0u64;
            while !publishing_done.is_finished() {
                let unindexed: i64 = client
                    .eval(
                        "return redis.call('EXISTS', KEYS[1]) == 1 and redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 0 and 1 or 0",
                        vec![stream.clone(), index.clone()],
                        vec!["k"],
                    )
                    .await?;
                anyhow::ensure!(unindexed == 0, "the stream existed without its index entry");
                checks += 1;
            }
            anyhow::Ok(checks)
        })
    };
    // Like a consumer, find the partition through the index only; consume
    // everything and reap as soon as it is drained.
    let mut consumed = Vec::new();
    let client = owner.client().clone();
    loop {
        if !client.sismember::<bool, _, _>(partition.index(), "k").await? {
            if publishing.is_finished() {
                break;
            }
            tokio::task::yield_now().await;
            continue;
        }
        let Some(lease) = owner.acquire("G", &partition).await? else {
            anyhow::bail!("nobody else holds the lease");
        };
        match owner.read(&lease, "G", &partition, 100).await? {
            ReadOutcome::Entries { entries, .. } => {
                let ids: Vec<&str> = entries.iter().map(|e| e.id()).collect();
                owner.ack(&lease, "G", &partition, Lane::Primary, &ids).await?;
                for entry in &entries {
                    consumed.push(common::seq_of(&entry.decode()?));
                }
            }
            ReadOutcome::Idle(_) | ReadOutcome::Gone => {
                if owner.reap(&lease, &partition, Duration::from_millis(1)).await? == ReapOutcome::Reaped {
                    reaps.fetch_add(1, Ordering::Relaxed);
                }
            }
            other => anyhow::bail!("unexpected {other:?}"),
        }
    }
    let total = publishing.await??;
    let checks = watching.await??;
    assert!(checks > 10, "the watcher ran ({checks} checks)");
    consumed.sort_unstable();
    assert_eq!(
        consumed,
        (0..total).collect::<Vec<_>>(),
        "every message consumed exactly once"
    );
    let reaps = reaps.load(Ordering::Relaxed);
    assert!(
        reaps >= WANTED_REAPS,
        "the partition was reaped while publishing went on ({reaps} reaps in {total} publishes)"
    );
    assert!(
        !client.exists::<bool, _>(partition.primary()).await?,
        "no stream is left behind its index entry"
    );
    Ok(())
}

/// A publish retried after its reply was lost is not appended twice: the
/// proxy forwards the publish to Redis, swallows the reply and drops the
/// connection; the client resends it after reconnecting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_resent_after_a_lost_reply_is_appended_once() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let proxy = common::proxy::Proxy::start(redis.port()).await?;
    let category = common::category("dedup");
    let client = pool(&redis.url()).await?;
    let through_proxy = ordo_redis::RedisBroker::builder(proxy.url())
        .config(config(15_000, 3_600_000, 0))
        .pool_size(1)
        .build()
        .await?;
    // Loads the script through the proxy first.
    through_proxy
        .publish(&[publication(&category, "warm", 0, Lane::Primary)])
        .await?;
    proxy.lose_next_reply();
    let once = publication(&category, "k", 1, Lane::Primary);
    through_proxy.publish(std::slice::from_ref(&once)).await?;
    assert!(proxy.reply_lost());
    assert_eq!(
        client.xlen::<u64, _>(common::stream(&category, "k")).await?,
        1,
        "the resent publish was appended again"
    );
    // A relay publishing the same message again (its mark failed) too.
    let publisher = broker(&redis.url(), config(15_000, 3_600_000, 0)).await?;
    publisher.publish(std::slice::from_ref(&once)).await?;
    publisher
        .publish(&[publication(&category, "k", 2, Lane::Primary)])
        .await?;
    assert_eq!(client.xlen::<u64, _>(common::stream(&category, "k")).await?, 2);
    Ok(())
}

#[tokio::test]
async fn a_library_the_server_lost_is_loaded_again() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("flush");
    let publisher = broker(&url, config(15_000, 3_600_000, 0)).await?;
    publisher
        .publish(&[publication(&category, "k", 0, Lane::Primary)])
        .await?;
    // What a restart without persistence (functions are kept in RDB/AOF
    // and replicated, unlike the script cache), or a node added to a
    // cluster, leaves behind: the broker's user may load, so it does.
    let client = pool(&url).await?;
    client.next().function_flush::<()>(false).await?;
    publisher
        .publish(&[publication(&category, "k", 1, Lane::Primary)])
        .await?;
    assert_eq!(client.xlen::<u64, _>(common::stream(&category, "k")).await?, 2);
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test]
    a_batch_over_many_slots_keeps_each_key_in_order_and_every_category_is_found
);

/// A batch spanning many slots (on a cluster: several nodes) lands whole,
/// each key's entries in publish order; every partition is found through
/// its category's directory, and the operator's category scan finds every
/// category whatever node its keys live on. Publishing again to known slots
/// lists nothing again.
async fn a_batch_over_many_slots_keeps_each_key_in_order_and_every_category_is_found(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let a = broker(&url, config(15_000, 3_600_000, 0)).await?;
    let client = pool(&url).await?;
    let categories: Vec<String> = (0..6).map(|i| common::category(&format!("spread{i}"))).collect();
    let keys = ["a", "b", "c", "d", "e"];
    let mut batch = Vec::new();
    for seq in 0..4 {
        for category in &categories {
            for key in keys {
                batch.push(publication(category, key, seq, Lane::Primary));
            }
        }
    }
    a.publish(&batch).await?;

    let status = ordo_redis::ClusterStatus::new(client.clone(), "backfill");
    let found = status.categories().await?;
    for category in &categories {
        assert!(found.contains(category), "{category} found in {found:?}");
        assert_eq!(status.partition_keys(category).await?, keys, "{category}");
        for key in keys {
            let entries: Vec<(String, std::collections::HashMap<String, String>)> = client
                .xrange(common::stream(category, key), "-", "+", None)
                .await?;
            let seqs: Vec<u64> = entries
                .iter()
                .map(|(_, fields)| {
                    let envelope: ordo_core::contract::message::Envelope =
                        serde_json::from_str(&fields["envelope"]).expect("an envelope");
                    common::seq_of(&envelope)
                })
                .collect();
            assert_eq!(seqs, [0, 1, 2, 3], "{category}:{key} in order");
        }
    }

    // The slots are listed once per broker: a second batch to the same
    // partitions adds nothing to the directories.
    let directory = ordo_redis::internals::names::index_directory(&categories[0]);
    let _: Value = client.del(&directory).await?;
    a.publish(&batch[..keys.len() * categories.len()]).await?;
    assert!(
        !client.exists::<bool, _>(&directory).await?,
        "a known slot is not listed again"
    );
    Ok(())
}

/// A node's `FCALL` calls and failed calls, from its `INFO commandstats`.
async fn fcall_stats(node: &Pool) -> anyhow::Result<(u64, u64)> {
    Ok((
        common::command_stat(node, "fcall", "calls").await?,
        common::command_stat(node, "fcall", "failed_calls").await?,
    ))
}

/// A client on each primary of `cluster` alone, by node index.
async fn primaries(cluster: &RedisCluster) -> anyhow::Result<BTreeMap<usize, Pool>> {
    let mut nodes = BTreeMap::new();
    for index in cluster.primaries()? {
        nodes.insert(index, pool(&cluster.node(index)?.url()).await?);
    }
    Ok(nodes)
}

/// On a cluster a batch costs one script call per node and 128
/// publications, the nodes' calls at once: 64 keys interleaved (consecutive
/// publications nearly always of different slots) cost each primary the
/// chunks of what it serves, not a call per run of one slot (512 calls
/// before). Each key's entries are in batch order.
#[tokio::test]
async fn a_batch_over_many_keys_costs_one_call_per_cluster_node_and_chunk() -> anyhow::Result<()> {
    let cluster = RedisCluster::start_local()?;
    let url = cluster.url();
    let category = common::category("pernode");
    let publisher = broker(&url, config(15_000, 3_600_000, 0)).await?;
    let client = pool(&url).await?;
    // A first publish (the broker loaded the library when it was built).
    publisher
        .publish(&[publication(&category, "warm", 0, Lane::Primary)])
        .await?;

    let keys = common::keys(64);
    let seqs = 8;
    let mut batch = Vec::new();
    for seq in 0..seqs {
        for key in &keys {
            batch.push(publication(&category, key, seq, Lane::Primary));
        }
    }
    let mut served: BTreeMap<usize, usize> = BTreeMap::new();
    for key in &keys {
        let node = cluster.node_for_key(&common::stream(&category, key))?;
        *served.entry(node).or_default() += usize::try_from(seqs)?;
    }
    assert_eq!(served.len(), 3, "64 keys over the three primaries: {served:?}");
    let nodes = primaries(&cluster).await?;
    let mut before = BTreeMap::new();
    for (index, node) in &nodes {
        before.insert(*index, fcall_stats(node).await?.0);
    }

    publisher.publish(&batch).await?;

    for (index, node) in &nodes {
        let calls = fcall_stats(node).await?.0 - before[index];
        let publications = served.get(index).copied().unwrap_or(0);
        assert_eq!(
            calls,
            u64::try_from(publications.div_ceil(128))?,
            "node {index} serves {publications} of the batch's {} publications",
            batch.len()
        );
    }
    for key in &keys {
        assert_eq!(
            common::stream_seqs(&client, &category, key).await?,
            (0..seqs).collect::<Vec<_>>(),
            "{key} in batch order"
        );
    }
    Ok(())
}

/// A slot that moved since the broker read the cluster view (a resharding)
/// fails the call naming it before anything is written; the broker
/// refreshes its view, groups what was not written by node again and
/// publishes it once more. Every publication lands once and in order, even
/// with the message-id window off (nothing of the refused call was written).
#[tokio::test]
async fn a_batch_naming_a_moved_slot_is_grouped_again_and_published_once() -> anyhow::Result<()> {
    let cluster = RedisCluster::start_local()?;
    let url = cluster.url();
    let category = common::category("moved");
    let publisher = RedisBroker::builder(url.as_str())
        .config(config(15_000, 3_600_000, 0))
        .publish_dedup_window(Duration::ZERO)
        .build()
        .await?;
    let client = pool(&url).await?;
    // The broker's clients read the cluster view.
    publisher
        .publish(&[publication(&category, "warm", 0, Lane::Primary)])
        .await?;
    let nodes = primaries(&cluster).await?;

    // Two keys served by one primary, in two slots; the second one's slot
    // then moves to another primary behind the broker's back.
    let keys = common::keys(64);
    let slot = |key: &str| common::partition(&category, key).slot();
    let owner = |key: &str| cluster.node_for_key(&common::stream(&category, key));
    let stays = &keys[0];
    let from = owner(stays)?;
    let used = [
        slot(stays),
        slot("warm"),
        fred::types::cluster::ClusterRouting::hash_key(
            ordo_redis::internals::names::index_directory(&category).as_bytes(),
        ),
    ];
    let mut moves = None;
    for key in &keys[1..] {
        if owner(key)? == from && !used.contains(&slot(key)) {
            moves = Some(key);
            break;
        }
    }
    let moves = moves.context("a second key on the same primary")?;
    let to = *nodes
        .keys()
        .find(|&&index| index != from)
        .context("another primary")?;
    cluster.move_empty_slot(slot(moves), to)?;
    assert_eq!(owner(moves)?, to);
    let failed_before = fcall_stats(&nodes[&from]).await?.1;

    publisher
        .publish(&[
            publication(&category, stays, 0, Lane::Primary),
            publication(&category, moves, 0, Lane::Primary),
            publication(&category, stays, 1, Lane::Primary),
            publication(&category, moves, 1, Lane::Primary),
        ])
        .await?;

    assert_eq!(
        fcall_stats(&nodes[&from]).await?.1,
        failed_before + 1,
        "the call grouped by the stale view failed on the old primary"
    );
    assert_eq!(
        common::stream_seqs(&client, &category, stays).await?,
        [0, 1],
        "{stays}"
    );
    assert_eq!(
        common::stream_seqs(&client, &category, moves).await?,
        [0, 1],
        "{moves}"
    );
    Ok(())
}

/// Batches over many keys published while a primary fails over (a manual
/// `CLUSTER FAILOVER`), the publisher publishing each batch again from what
/// a failed publish reports as published, as the outbox processor does:
/// afterwards every key has each of its entries once, in batch order (a
/// publish never reports more than it wrote, and what it wrote beyond that
/// is dropped as a re-publish by the message-id window).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_published_across_a_primary_failover_keep_each_key_in_order() -> anyhow::Result<()> {
    let mut cluster = RedisCluster::builder().replicas(true).start()?;
    let url = cluster.url();
    let category = common::category("failover");
    let publisher = broker(&url, config(15_000, 3_600_000, 0)).await?;
    let client = pool(&url).await?;
    let keys = common::keys(32);
    let primary = cluster.node_for_key(&common::stream(&category, &keys[0]))?;
    let replica = *cluster
        .replicas_of(primary)?
        .first()
        .context("the primary has a replica")?;

    let failed_over = Arc::new(AtomicBool::new(false));
    let failing_over = {
        let failed_over = Arc::clone(&failed_over);
        tokio::task::spawn_blocking(move || {
            cluster.failover(replica)?;
            failed_over.store(true, Ordering::SeqCst);
            anyhow::Ok(cluster)
        })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let (mut seq, mut during, mut after, mut failures) = (0, 0, 0, 0);
    while after < 5 {
        let done = failed_over.load(Ordering::SeqCst);
        if !done && failing_over.is_finished() {
            failing_over.await??;
            anyhow::bail!("the failover ended without saying so");
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the failover did not end within 60 s"
        );
        let batch: Vec<Publication> = (seq..seq + 2)
            .flat_map(|seq| keys.iter().map(move |key| (key, seq)).collect::<Vec<_>>())
            .map(|(key, seq)| publication(&category, key, seq, Lane::Primary))
            .collect();
        let mut published = 0;
        while published < batch.len() {
            match publisher.publish(&batch[published..]).await {
                Ok(()) => published = batch.len(),
                Err(error) => {
                    failures += 1;
                    published += error.published;
                    anyhow::ensure!(
                        tokio::time::Instant::now() < deadline,
                        "still failing after 60 s: {error}"
                    );
                }
            }
        }
        seq += 2;
        if done {
            after += 1;
        } else {
            during += 1;
        }
    }
    let cluster = failing_over.await??;
    assert!(during > 0, "batches published while failing over");
    assert_ne!(
        cluster.node_for_key(&common::stream(&category, &keys[0]))?,
        primary
    );
    for key in &keys {
        assert_eq!(
            common::stream_seqs(&client, &category, key).await?,
            (0..seq).collect::<Vec<_>>(),
            "{key} once each and in order ({failures} publishes failed)"
        );
    }
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test]
    a_publish_failing_part_way_reports_a_written_prefix_and_the_rest_can_follow
);

/// A publish whose `XADD` fails on one key (its stream name holds a string)
/// reports how many publications from the start of the batch were written:
/// exactly up to the failing one on a single Redis, at most that on a
/// cluster (where other nodes' calls run at once, and the failure stops
/// them before their next call), and never one that is not written.
/// Publishing the rest again once the key is fixed, as the outbox does,
/// leaves every key with each of its entries once, in batch order: what was
/// written beyond the reported prefix is dropped as a re-publish.
async fn a_publish_failing_part_way_reports_a_written_prefix_and_the_rest_can_follow(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("partial");
    let publisher = broker(&url, config(15_000, 3_600_000, 0)).await?;
    let client = pool(&url).await?;
    let keys = common::keys(24);
    let first_bad = 10;
    let bad = &keys[first_bad];
    let _: Value = client
        .set(common::stream(&category, bad), "not a stream", None, None, false)
        .await?;
    let mut batch = Vec::new();
    for seq in 0..3 {
        for key in &keys {
            batch.push(publication(&category, key, seq, Lane::Primary));
        }
    }

    let error = publisher
        .publish(&batch)
        .await
        .err()
        .context("the publish fails at the key whose stream is a string")?;
    let published = error.published;
    assert!(
        published <= first_bad,
        "{published} reported written, the first failing publication is {first_bad}"
    );
    if redis.topology() == Topology::Single {
        assert_eq!(published, first_bad, "in order on one server");
    }
    for key in keys.iter().filter(|key| *key != bad) {
        let reported = batch[..published]
            .iter()
            .filter(|publication| publication.key.as_deref() == Some(key.as_str()))
            .count();
        let seqs = common::stream_seqs(&client, &category, key).await?;
        assert!(
            seqs.len() >= reported && seqs.iter().copied().eq(0..u64::try_from(seqs.len())?),
            "{key}: {reported} reported written, the stream has {seqs:?}"
        );
    }

    let _: Value = client.del(common::stream(&category, bad)).await?;
    publisher.publish(&batch[published..]).await?;
    for key in &keys {
        assert_eq!(
            common::stream_seqs(&client, &category, key).await?,
            [0, 1, 2],
            "{key} once each, in batch order"
        );
    }
    Ok(())
}

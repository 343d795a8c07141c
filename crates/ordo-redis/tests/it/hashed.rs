//! Hashed partitions (`[categories.NAME] partitions = N`) end to end,
//! against a real Redis: many keys per partition, each in order and one at
//! a time, side by side; fairness to the other keys of a hot key's
//! partition; parking a poison key while the others flow.

use crate::common;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::KeysInterface;
use ordo_core::Partitions;
use ordo_redis::{PartitionId, PartitionKeys};

use common::topology::TestRedis;
use common::{Outcome, Recorder, Running, broker, config, keys, pool, publish_all, publish_seqs, subscribe};

/// The test config with `category` split into `n` hashed partitions.
fn hashed(category: &str, n: u32, max_retries: u32) -> ordo_core::Config {
    config(3_000, 3_600_000, max_retries)
        .with_partitions(category, Partitions::Hashed(NonZeroU32::new(n).unwrap()))
}

/// The names of hashed partition `index` of `category`.
fn hashed_partition(category: &str, index: u32) -> PartitionKeys {
    PartitionKeys::of(PartitionId::hashed(category, index), "backfill")
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    the_keys_of_a_hashed_partition_run_side_by_side_each_in_order
);

async fn the_keys_of_a_hashed_partition_run_side_by_side_each_in_order(
    redis: TestRedis,
) -> anyhow::Result<()> {
    common::logs();
    let url = redis.url();
    let category = common::category("hashed");
    let keys = keys(40);
    let recorder = Recorder::with(Arc::new(|_, _, _| Outcome::Slow(Duration::from_millis(2))));
    let broker = broker(&url, hashed(&category, 2, 0)).await?;
    publish_all(&broker, &category, &keys, 0..25).await?;

    let client = pool(&url).await?;
    // Two partitions, two streams: none per key.
    for index in 0..2 {
        let stream = hashed_partition(&category, index);
        assert_eq!(
            client.exists::<u32, _>(stream.primary()).await?,
            1,
            "{}",
            stream.primary()
        );
    }
    assert_eq!(
        client
            .exists::<u32, _>(common::stream(&category, &keys[0]))
            .await?,
        0
    );

    let run = Running::start(
        &broker,
        vec![subscribe::partitioned("Projector", &category, &recorder)],
    );
    recorder
        .until(Duration::from_secs(30), "every message handled", |r| {
            r.handled().len() >= 40 * 25
        })
        .await?;
    for key in &keys {
        assert_eq!(
            recorder.seqs(key),
            (0..25).collect::<Vec<_>>(),
            "key {key} in publish order, once each"
        );
    }
    assert!(
        recorder.overlaps().is_empty(),
        "same-key overlaps: {:?}",
        recorder.overlaps()
    );
    let side_by_side = recorder.record.lock().unwrap().max_in_flight;
    assert!(
        side_by_side > 2,
        "keys of one partition ran side by side (two partitions, {side_by_side} keys at once at most)"
    );
    // One lease per partition, none per key.
    for index in 0..2 {
        let lease = hashed_partition(&category, index).lease("Projector").lease;
        assert_eq!(client.exists::<u32, _>(&lease).await?, 1, "{lease}");
    }
    let per_key = common::partition(&category, &keys[0]).lease("Projector").lease;
    assert_eq!(client.exists::<u32, _>(&per_key).await?, 0);
    run.stop().await?;
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_hot_key_does_not_hold_up_the_other_keys_of_its_partition
);

/// A hot key's backlog is ahead of every other key's message in the one
/// partition's stream: the reader moves on past it (its queue is full), so
/// the other keys run while the hot key is still far from done, and the
/// hot key's messages moved past run later, in order.
async fn a_hot_key_does_not_hold_up_the_other_keys_of_its_partition(redis: TestRedis) -> anyhow::Result<()> {
    common::logs();
    let url = redis.url();
    let category = common::category("hot");
    let cold = keys(30);
    let recorder = Recorder::with(Arc::new(|key, _, _| {
        if key == "hot" {
            Outcome::Slow(Duration::from_millis(3))
        } else {
            Outcome::Succeed
        }
    }));
    let broker = broker(&url, hashed(&category, 1, 0)).await?;
    publish_seqs(&broker, &category, "hot", 0..1000).await?;
    publish_all(&broker, &category, &cold, 0..2).await?;

    let run = Running::start(
        &broker,
        vec![subscribe::partitioned("Projector", &category, &recorder)],
    );
    recorder
        .until(Duration::from_secs(20), "every cold key handled", |r| {
            cold.iter().all(|key| r.seqs(key) == [0, 1])
        })
        .await?;
    let hot_so_far = recorder.seqs("hot").len();
    assert!(
        hot_so_far < 300,
        "the cold keys waited for {hot_so_far} of the hot key's 1,000 messages"
    );
    recorder
        .until(Duration::from_secs(30), "the hot key's backlog handled", |r| {
            r.seqs("hot").len() >= 1000
        })
        .await?;
    assert_eq!(
        recorder.seqs("hot"),
        (0..1000).collect::<Vec<_>>(),
        "the hot key in publish order, once each"
    );
    assert!(
        recorder.overlaps().is_empty(),
        "same-key overlaps: {:?}",
        recorder.overlaps()
    );
    run.stop().await?;
    Ok(())
}

/// The entries the reader moves past a saturated key are kept in memory,
/// behind its queue: each is read from Redis once. (Before, they were left
/// in the lane and read back with `XRANGE` once the queue emptied: every
/// entry of a hot key read twice.) Three hot keys of 500 messages each,
/// interleaved, fill their queues at once, and run in publish order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_entries_moved_past_a_saturated_key_are_read_from_redis_once() -> anyhow::Result<()> {
    common::logs();
    let redis = ordo_testkit::Redis::start()?;
    let url = redis.url();
    let client = pool(&url).await?;
    let category = common::category("once");
    let hot = keys(3);
    let broker = broker(&url, hashed(&category, 1, 0)).await?;
    publish_all(&broker, &category, &hot, 0..500).await?;
    let xrange_before = common::command_stat(&client, "xrange", "calls").await?;
    let recorder = Recorder::new();
    let run = Running::start(
        &broker,
        vec![subscribe::partitioned("Projector", &category, &recorder)],
    );
    recorder
        .until(Duration::from_secs(30), "every hot key's backlog handled", |r| {
            hot.iter().all(|key| r.seqs(key).len() >= 500)
        })
        .await?;
    for key in &hot {
        assert_eq!(
            recorder.seqs(key),
            (0..500).collect::<Vec<_>>(),
            "{key} in publish order, once each"
        );
    }
    assert!(
        recorder.overlaps().is_empty(),
        "same-key overlaps: {:?}",
        recorder.overlaps()
    );
    let read_back = common::command_stat(&client, "xrange", "calls").await? - xrange_before;
    assert_eq!(
        read_back, 0,
        "{read_back} read-backs (XRANGE) of entries read before"
    );
    run.stop().await?;
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_poison_message_parks_its_key_and_the_other_keys_flow
);

/// A key whose message fails every attempt is parked: its later messages
/// are held aside in order (out of the partition's lane, which is left
/// with nothing pending), the partition's other keys keep flowing, and the
/// operator resolves the key as a halted partition (listed, inspected,
/// retried or dead-lettered against the head it saw); the held messages
/// then run first, in order, before any newer message of the key.
async fn a_poison_message_parks_its_key_and_the_other_keys_flow(redis: TestRedis) -> anyhow::Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};

    use fred::interfaces::StreamsInterface;
    use ordo_core::contract::broker::Broker;

    common::logs();
    let url = redis.url();
    let category = common::category("park");
    let others = keys(10);
    let poisoned = Arc::new(AtomicBool::new(true));
    let poison = poisoned.clone();
    let recorder = Recorder::with(Arc::new(move |key, seq, _| {
        let fails =
            (key == "bad" && seq == 2 && poison.load(Ordering::SeqCst)) || (key == "worse" && seq == 1);
        if fails { Outcome::Fail } else { Outcome::Succeed }
    }));
    let broker = broker(&url, hashed(&category, 1, 1)).await?;
    let bad = ["bad".to_owned(), "worse".to_owned()];
    publish_all(&broker, &category, &bad, 0..5).await?;
    publish_all(&broker, &category, &others, 0..10).await?;
    let run = Running::start(
        &broker,
        vec![subscribe::partitioned("Projector", &category, &recorder)],
    );

    recorder
        .until(Duration::from_secs(20), "the other keys handled", |r| {
            others
                .iter()
                .all(|key| r.seqs(key) == (0..10).collect::<Vec<_>>())
        })
        .await?;
    let admin = broker.admin();
    ordo_testkit::eventually(Duration::from_secs(10), "both poison keys parked", || {
        let admin = admin.clone();
        async move { Ok(admin.halted().await?.len() == 2) }
    })
    .await?;
    assert_eq!(
        recorder.seqs("bad"),
        [0, 1],
        "nothing of a parked key runs after its poison message"
    );
    assert_eq!(recorder.seqs("worse"), [0]);
    assert_eq!(
        recorder.attempts("bad", 2),
        Some(2),
        "max_retries = 1: two attempts"
    );
    let parked = admin.halted().await?;
    assert!(
        parked
            .iter()
            .all(|p| p.parked && p.category == category && p.group == "Projector")
    );
    assert_eq!(
        parked.iter().map(|p| p.key.as_str()).collect::<Vec<_>>(),
        ["bad", "worse"]
    );

    // Newer messages of a parked key are held behind it.
    publish_seqs(&broker, &category, "bad", 5..8).await?;
    let partition = hashed_partition(&category, 0);
    let client = pool(&url).await?;
    ordo_testkit::eventually(Duration::from_secs(10), "the newer messages held", || {
        let (client, held) = (client.clone(), partition.held("Projector", "bad"));
        async move { Ok(client.xlen::<u64, _>(held).await? == 6) }
    })
    .await?;
    // Nothing of the parked keys is left pending in the partition's lane.
    let pending: fred::types::Value = client.xpending(partition.primary(), "Projector", ()).await?;
    assert_eq!(
        pending.into_array().first().and_then(fred::types::Value::as_u64),
        Some(0)
    );

    // Resolve: the inspected head, retried (now healthy) and dead-lettered.
    let inspected = admin.inspect("Projector", &category, "bad").await?;
    let head = inspected.head.expect("the parked head is held");
    assert_eq!(common::seq_of(&head.decode()?), 2);
    poisoned.store(false, Ordering::SeqCst);
    admin
        .head("Projector", &category, "bad")
        .expecting(&inspected.halt.head)
        .retry()
        .await?;
    let worse = admin.inspect("Projector", &category, "worse").await?;
    let stale = admin
        .head("Projector", &category, "worse")
        .expecting("0-1")
        .skip()
        .await;
    assert!(
        matches!(stale, Err(ordo_redis::Error::HeadChanged { .. })),
        "{stale:?}"
    );
    admin
        .head("Projector", &category, "worse")
        .expecting(&worse.halt.head)
        .dead_letter()
        .await?;
    broker
        .publish(&[common::publication(
            &category,
            "bad",
            8,
            ordo_core::contract::key::Lane::Primary,
        )])
        .await?;

    recorder.wait_seqs("bad", &(0..9).collect::<Vec<_>>()).await?;
    recorder.wait_seqs("worse", &[0, 2, 3, 4]).await?;
    assert!(admin.halted().await?.is_empty());
    assert_eq!(
        client.xlen::<u64, _>(partition.dlq()).await?,
        1,
        "the dead-lettered head"
    );
    assert_eq!(
        client
            .exists::<u32, _>(partition.held("Projector", "bad"))
            .await?,
        0,
        "nothing held any more"
    );
    assert!(
        recorder.overlaps().is_empty(),
        "same-key overlaps: {:?}",
        recorder.overlaps()
    );
    run.stop().await?;
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    outbox_positions_stay_per_key_in_a_hashed_partition
);

/// An outbox relay numbers each key's lane 1, 2, 3...; a hashed partition
/// holds many keys, so the positions it keeps are per key: a key's low
/// position is not taken for one already published because another key of
/// the partition is further on, and a position published again is dropped.
async fn outbox_positions_stay_per_key_in_a_hashed_partition(redis: TestRedis) -> anyhow::Result<()> {
    use fred::interfaces::StreamsInterface;
    use ordo_core::contract::broker::{Broker, POSITION_METADATA, POSITION_SCOPE_METADATA, Publication};

    let url = redis.url();
    let category = common::category("positions");
    let broker = broker(&url, hashed(&category, 1, 0)).await?;
    let positioned = |key: &str, position: u64| {
        let mut publication =
            common::publication(&category, key, position, ordo_core::contract::key::Lane::Primary);
        let metadata = &mut publication.envelope.metadata;
        metadata.insert(POSITION_SCOPE_METADATA.to_owned(), format!("{category}:{key}"));
        metadata.insert(POSITION_METADATA.to_owned(), position.to_string());
        publication
    };
    let first: Vec<Publication> = vec![
        positioned("a", 1),
        positioned("a", 2),
        positioned("a", 3),
        positioned("b", 1),
        positioned("b", 2),
    ];
    broker.publish(&first).await?;
    // A relay publishing again from an older mark: all already there.
    broker
        .publish(&[positioned("a", 2), positioned("b", 2), positioned("b", 3)])
        .await?;

    let client = pool(&url).await?;
    let entries: fred::types::Value = client
        .xrange(hashed_partition(&category, 0).primary(), "-", "+", None)
        .await?;
    let published: Vec<(String, u64)> = entries
        .into_array()
        .into_iter()
        .map(|entry| {
            let fields = entry.into_array().pop().unwrap().into_array();
            let envelope = fields
                .chunks(2)
                .find(|pair| pair[0].as_str().as_deref() == Some("envelope"))
                .and_then(|pair| pair[1].as_string())
                .unwrap();
            let envelope: ordo_core::contract::message::Envelope = serde_json::from_str(&envelope).unwrap();
            (envelope.partition_key.clone().unwrap(), common::seq_of(&envelope))
        })
        .collect();
    assert_eq!(
        published,
        [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2), ("b", 3)]
            .map(|(k, s)| (k.to_owned(), s))
            .to_vec()
    );
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    changing_a_categorys_partitions_waits_for_a_drain_and_refuses_processes_configured_otherwise
);

/// Repartitioning is offline: a process configured with other partitions
/// than Redis records publishes and consumes nothing (its key's messages
/// would land in other partitions than the key's earlier ones), the switch
/// is refused until every message is handled, and after it the old
/// setting is the one refused.
async fn changing_a_categorys_partitions_waits_for_a_drain_and_refuses_processes_configured_otherwise(
    redis: TestRedis,
) -> anyhow::Result<()> {
    use ordo_core::contract::broker::Broker;

    let url = redis.url();
    let category = common::category("switch");
    let four = Partitions::Hashed(NonZeroU32::new(4).unwrap());
    let recorder = Recorder::new();
    let sub = || subscribe::partitioned("Projector", &category, &recorder);
    let per_key = broker(&url, config(3_000, 3_600_000, 0)).await?;
    let hashed = broker(&url, hashed(&category, 4, 0)).await?;
    publish_seqs(&per_key, &category, "k", 0..5).await?;

    let refused = hashed
        .publish(&[common::publication(
            &category,
            "k",
            5,
            ordo_core::contract::key::Lane::Primary,
        )])
        .await
        .expect_err("configured otherwise");
    let message = format!("{:#}", anyhow::Error::from(refused));
    assert!(
        message.contains(&format!(
            "category `{category}` is partitioned `per_key` in Redis but `4` in this process's configuration"
        )),
        "{message}"
    );
    let run = Running::start(&hashed, vec![sub()]);
    let stopped = tokio::time::timeout(Duration::from_secs(10), run.task).await??;
    let message = stopped
        .expect_err("a consumer configured otherwise does not start")
        .to_string();
    assert!(
        message.contains("partitioned `per_key` in Redis but `4`"),
        "{message}"
    );

    let admin = per_key.admin();
    let not_drained = admin
        .repartition(&category, four)
        .await
        .expect_err("five messages to handle");
    assert!(
        matches!(&not_drained, ordo_redis::Error::NotDrained { what, .. } if what.contains("5 messages not yet delivered")),
        "{not_drained}"
    );

    let run = Running::start(&per_key, vec![sub()]);
    recorder.wait_seqs("k", &[0, 1, 2, 3, 4]).await?;
    run.stop().await?;
    assert_eq!(
        admin.repartition(&category, four).await?,
        Some(Partitions::PerKey)
    );

    let old = broker(&url, config(3_000, 3_600_000, 0)).await?;
    let refused = old
        .publish(&[common::publication(
            &category,
            "k",
            5,
            ordo_core::contract::key::Lane::Primary,
        )])
        .await
        .expect_err("the old setting, after the switch");
    assert!(format!("{:#}", anyhow::Error::from(refused)).contains("partitioned `4` in Redis but `per_key`"));
    publish_seqs(&hashed, &category, "k", 5..8).await?;
    let run = Running::start(&hashed, vec![sub()]);
    recorder.wait_seqs("k", &(0..8).collect::<Vec<_>>()).await?;
    run.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hashed_partition_with_a_parked_key_is_not_retired_by_another_group() -> anyhow::Result<()> {
    use ordo_testkit::Redis;

    common::logs();
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("keep");
    let control = common::category("control");
    let strict = Recorder::with(Arc::new(|key, _, _| {
        if key == "bad" {
            Outcome::Fail
        } else {
            Outcome::Succeed
        }
    }));
    let lenient = Recorder::new();
    let timer = Recorder::new();
    // Partitions are retired after 1 s idle.
    let config =
        config(3_000, 1_000, 0).with_partitions(&category, Partitions::Hashed(NonZeroU32::new(1).unwrap()));
    let broker = broker(&url, config).await?;
    publish_all(&broker, &category, &["bad".to_owned(), "good".to_owned()], 0..3).await?;
    let run = Running::start(
        &broker,
        vec![
            subscribe::partitioned("Strict", &category, &strict),
            subscribe::partitioned("Lenient", &category, &lenient),
            subscribe::partitioned("Timer", &control, &timer),
        ],
    );
    let admin = broker.admin();
    ordo_testkit::eventually(Duration::from_secs(10), "`bad` parked for Strict", || {
        let admin = admin.clone();
        async move { Ok(admin.halted().await?.iter().any(|h| h.key == "bad" && h.parked)) }
    })
    .await?;
    lenient.wait_seqs("bad", &[0, 1, 2]).await?;
    // A partition of another category, published to after this one went
    // quiet, is retired: this one had its chance too.
    publish_seqs(&broker, &control, "c", 0..1).await?;
    timer.wait_seqs("c", &[0]).await?;
    let client = pool(&url).await?;
    ordo_testkit::eventually(Duration::from_secs(10), "the control partition retired", || {
        let (client, stream) = (client.clone(), common::stream(&control, "c"));
        async move { Ok(client.exists::<u32, _>(stream).await? == 0) }
    })
    .await?;
    let partition = hashed_partition(&category, 0);
    assert_eq!(
        client.exists::<u32, _>(partition.primary()).await?,
        1,
        "a partition with a parked key's messages held aside was retired"
    );
    assert_eq!(strict.seqs("good"), [0, 1, 2]);
    run.stop().await?;
    Ok(())
}

/// A read whose reply is lost (the command runs in Redis after its client
/// timed out) delivered entries the owner never got: they are pending, and
/// only a read of the pending entries hands them out again. The owner reads
/// them on its next try, rather than only new entries from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_a_read_delivered_without_a_reply_are_read_again() -> anyhow::Result<()> {
    use ordo_testkit::Redis;

    common::logs();
    let redis = Redis::start()?;
    let proxy = common::proxy::Proxy::start(redis.port()).await?;
    let category = common::category("lostread");
    // Commands time out after a third of the lease TTL (1 s); the retry
    // after a failed read waits 2 s, when the held-back read has run.
    let text = format!(
        "[server.partitioning]\nlease_ttl_ms = 3000\nheartbeat_interval_seconds = 0.6\n\
         poll_interval_seconds = 0.1\ndiscovery_interval_seconds = 0.1\nreap_idle_ms = 3600000\n\
         max_retries = 0\nretry_backoff_initial_ms = 2000\nretry_backoff_max_ms = 2000\n\
         [categories.{category}]\npartitions = 1\n"
    );
    let config = ordo_core::Config::from_toml_str(&text)?;
    let direct = broker(&redis.url(), config.clone()).await?;
    let through_proxy = broker(&proxy.url(), config).await?;
    let recorder = Recorder::new();
    publish_seqs(&direct, &category, "k", 0..3).await?;
    let run = Running::start(
        &through_proxy,
        vec![subscribe::partitioned("Projector", &category, &recorder)],
    );
    recorder.wait_seqs("k", &[0, 1, 2]).await?;
    // Once the owner is idle and its doorbell armed, the next command
    // naming the backfill lane is its read when the doorbell rings.
    let client = pool(&redis.url()).await?;
    let partition = hashed_partition(&category, 0);
    ordo_testkit::eventually(Duration::from_secs(10), "the doorbell armed", || {
        let (client, doorbell) = (client.clone(), partition.doorbell());
        async move { Ok(client.exists::<u32, _>(doorbell).await? == 1) }
    })
    .await?;
    let lane = partition.backfill().to_owned();
    proxy.delay_next_containing(&lane, Duration::from_millis(1_500));
    publish_seqs(&direct, &category, "k", 3..6).await?;
    ordo_testkit::eventually(
        Duration::from_secs(10),
        "the held-back read delivered",
        || async { Ok(proxy.delayed_delivered()) },
    )
    .await?;
    recorder
        .until(
            Duration::from_secs(15),
            "the entries the lost read delivered",
            |r| r.seqs("k") == (0..6).collect::<Vec<_>>(),
        )
        .await?;
    run.stop().await?;
    Ok(())
}

/// A read the client sends twice (it resends the commands in flight when
/// its connection drops) returns the entries of its first run, not the
/// next ones: otherwise the owner would get only the second batch, and the
/// first would sit pending, unseen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_resent_after_a_reconnect_returns_the_entries_of_its_first_run() -> anyhow::Result<()> {
    use fred::prelude::{Builder, ClientLike};
    use fred::types::config::ReconnectPolicy;
    use ordo_redis::internals::{Partitions, ReadOutcome};
    use ordo_testkit::Redis;

    let redis = Redis::start()?;
    let proxy = common::proxy::Proxy::start(redis.port()).await?;
    let category = common::category("resend");
    let direct = broker(&redis.url(), hashed(&category, 1, 0)).await?;
    publish_seqs(&direct, &category, "k", 0..4).await?;
    // One connection through the proxy, resending what was in flight when
    // it drops (as the broker's pool does).
    let pool = Builder::from_config(fred::prelude::Config::from_url(&proxy.url())?)
        .set_policy(ReconnectPolicy::new_constant(0, 50))
        .build_pool(1)?;
    pool.init().await?;
    let owner = Partitions::new(pool, "resender", Duration::from_secs(15));
    let partition = hashed_partition(&category, 0);
    let lease = owner
        .acquire("Projector", &partition)
        .await?
        .expect("a free lease");
    let seqs = |outcome: ReadOutcome| -> anyhow::Result<Vec<u64>> {
        match outcome {
            ReadOutcome::Entries { entries, .. } => entries
                .iter()
                .map(|entry| Ok(common::seq_of(&entry.decode()?)))
                .collect(),
            other => anyhow::bail!("no entries: {other:?}"),
        }
    };
    // Warm the script cache through the proxy: a first read of two.
    let first = owner
        .read_hashed(
            &lease,
            "Projector",
            &partition,
            2,
            &["0".to_owned(), "0".to_owned()],
        )
        .await?;
    assert_eq!(seqs(first)?, [0, 1]);
    proxy.lose_next_reply();
    let after = [
        ids_of(&redis.url(), partition.primary(), 2).await?,
        "0".to_owned(),
    ];
    let resent = owner
        .read_hashed(&lease, "Projector", &partition, 2, &after)
        .await?;
    assert!(proxy.reply_lost(), "the reply was not lost");
    assert_eq!(
        seqs(resent)?,
        [2, 3],
        "the resent read returned other entries than its first run"
    );
    Ok(())
}

/// The id of entry `n` (from 1) of `stream`.
async fn ids_of(url: &str, stream: &str, n: usize) -> anyhow::Result<String> {
    use fred::interfaces::StreamsInterface;
    let client = pool(url).await?;
    let entries: fred::types::Value = client.xrange(stream, "-", "+", Some(n as u64)).await?;
    let last = entries
        .into_array()
        .pop()
        .expect("an entry")
        .into_array()
        .remove(0);
    Ok(last.as_string().expect("an id"))
}

//! A consumer group that joins a category whose partitions already exist
//! does not lose what is published after it joined: the other groups'
//! trimming (and reaping) cannot drop entries it has not read yet.
//!
//! The bug: a new group's consumer group was created on an existing
//! partition stream only when one of its owners first read it. Until then
//! the trimming after each acknowledgement only saw the other groups, so
//! entries published after the new group registered were trimmed away.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::SortedSetsInterface;
use ordo_core::contract::broker::Broker;
use ordo_core::contract::handler::HandlerKind;
use ordo_core::contract::key::Lane;
use ordo_testkit::Redis;

use common::topology::TestRedis;
use common::{Recorder, Running, broker, config, pool, publication, subscribe, subscription};
use ordo_testkit::eventually;

/// A group that registers at once but acquires nothing for 20 s (its first
/// discovery round only announces the instance).
fn slow_to_acquire() -> ordo_core::contract::config::Config {
    ordo_core::contract::config::Config::from_toml_str(
        "[server.partitioning]\n\
         lease_ttl_ms = 60000\n\
         discovery_interval_seconds = 20\n",
    )
    .expect("test config is valid")
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_new_group_gets_what_was_published_after_it_joined
);

async fn a_new_group_gets_what_was_published_after_it_joined(redis: TestRedis) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("order");
    let client = pool(&url).await?;
    let first = Recorder::new();
    let second = Recorder::new();
    let sub = |name: &'static str, recorder: &Recorder| subscribe::partitioned(name, &category, recorder);

    // The first group alone: the partition's stream is created without
    // the second group.
    let a = broker(&url, config(3_000, 3_600_000, 0)).await?;
    let run_a = Running::start(&a, vec![sub("First", &first)]);
    a.publish(&[publication(&category, "k", 0, Lane::Primary)])
        .await?;
    first.wait_seqs("k", &[0]).await?;

    // The second group joins: its instance registers it, then announces
    // itself (so registering is over), but reads nothing yet.
    let b = broker(&url, slow_to_acquire()).await?;
    let run_b = Running::start(&b, vec![sub("Second", &second)]);
    eventually(
        Duration::from_secs(10),
        "the second group's instance to announce itself",
        || async {
            let score: Option<f64> = client.zscore("ordo:instances:Second", b.instance_id()).await?;
            Ok(score.is_some())
        },
    )
    .await?;

    // Published after it joined, handled and acknowledged by the first group.
    a.publish(&[
        publication(&category, "k", 1, Lane::Primary),
        publication(&category, "k", 2, Lane::Primary),
    ])
    .await?;
    first.wait_seqs("k", &[0, 1, 2]).await?;
    run_b.stop().await?;

    // The second group's consumer runs for real now: it gets 1 and 2.
    let c = broker(&url, config(3_000, 3_600_000, 0)).await?;
    let run_c = Running::start(&c, vec![sub("Second", &second)]);
    eventually(
        Duration::from_secs(10),
        "the second group to handle 1, 2",
        || async {
            let seqs = second.seqs("k");
            Ok(seqs.ends_with(&[2]))
        },
    )
    .await?;
    let seqs = second.seqs("k");
    assert!(
        seqs.ends_with(&[1, 2]),
        "entries published after the group joined were trimmed before it read them: it handled {seqs:?}"
    );
    run_c.stop().await?;
    run_a.stop().await?;
    Ok(())
}

/// Redis restarted without persistence loses the group registries; the
/// workers keep running and must restore them, or the operator tool shows no
/// group (and `ordo inspect/skip` refuse) and a new stream gets no consumer
/// group for a second handler before the first one trims it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_restore_the_group_registries_after_redis_loses_its_data() -> anyhow::Result<()> {
    let mut redis = Redis::builder().start()?;
    let url = redis.url();
    let partitioned = common::category("order");
    let plain = common::category("audit");
    let recorder = Recorder::new();
    let a = broker(&url, config(2_000, 3_600_000, 0)).await?;
    let run = Running::start(
        &a,
        vec![
            subscribe::partitioned("P", &partitioned, &recorder),
            subscription(
                "B",
                HandlerKind::Event,
                &[&plain],
                false,
                Arc::new(Recorder::new()),
            ),
        ],
    );
    a.publish(&[publication(&partitioned, "k", 0, Lane::Primary)])
        .await?;
    recorder.wait_seqs("k", &[0]).await?;

    redis.restart()?;
    let status = ordo_redis::ClusterStatus::new(pool(&url).await?, "backfill");
    eventually(Duration::from_secs(10), "both registries restored", || {
        let status = status.clone();
        let (partitioned, plain) = (partitioned.clone(), plain.clone());
        async move {
            Ok(status.groups(&partitioned).await? == ["P"] && status.groups(&plain).await? == ["B"])
        }
    })
    .await?;
    run.stop().await?;
    Ok(())
}

/// A lane that exists without a registered group (created between the
/// joining group's two passes over the partitions, while publishes create
/// backfill lanes) gets the group at its next publish: what is published
/// after the registration is not trimmed away by the other groups.
#[tokio::test]
async fn a_lane_missed_while_a_group_joined_gets_it_at_the_next_publish() -> anyhow::Result<()> {
    use ordo_redis::PartitionKeys;
    use ordo_redis::internals::{Partitions, ReadOutcome};

    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("lanes");
    let client = pool(&url).await?;
    ordo_redis::internals::register_group(&client, &category, "First").await?;
    let publisher = broker(&url, config(15_000, 3_600_000, 0)).await?;
    publisher
        .publish(&[publication(&category, "k", 0, Lane::Backfill)])
        .await?;
    // The second group registers (and marks the category as joining, as
    // its first instance does for the time of its passes over the lanes);
    // the lane was missed by its passes.
    ordo_redis::internals::mark_joining(&client, &category, "Second", 600_000).await?;
    ordo_redis::internals::register_group(&client, &category, "Second").await?;
    publisher
        .publish(&[
            publication(&category, "k", 1, Lane::Backfill),
            publication(&category, "k", 2, Lane::Backfill),
        ])
        .await?;

    let partition = PartitionKeys::new(&category, "k", "backfill");
    let owner = Partitions::new(client.clone(), "a", Duration::from_secs(15));
    let first = owner.acquire("First", &partition).await?.expect("free");
    let ReadOutcome::Entries { entries, .. } = owner.read(&first, "First", &partition, 10).await? else {
        anyhow::bail!("the first group reads its entries");
    };
    let ids: Vec<&str> = entries.iter().map(|e| e.id()).collect();
    owner
        .ack(&first, "First", &partition, Lane::Backfill, &ids)
        .await?;

    let second = owner.acquire("Second", &partition).await?.expect("free");
    let seqs = match owner.read(&second, "Second", &partition, 10).await? {
        ReadOutcome::Entries { entries, .. } => entries
            .iter()
            .map(|e| Ok(common::seq_of(&e.decode()?)))
            .collect::<anyhow::Result<Vec<u64>>>()?,
        other => anyhow::bail!("expected entries, got {other:?}"),
    };
    assert!(
        seqs.ends_with(&[1, 2]),
        "entries published after the group registered were trimmed before it read them: it got {seqs:?}"
    );
    Ok(())
}

/// A group registered by a release without the per-slot registry copies
/// (only the category's registry has it) is registered again at start, so
/// the publish script of every slot creates it on new streams. The copies
/// exist on a Redis Cluster only (a script there reads the keys of its own
/// slot); on a single Redis the category's registry serves every slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_without_slot_copies_is_redone_at_start() -> anyhow::Result<()> {
    use fred::interfaces::SetsInterface;

    let redis = ordo_testkit::RedisCluster::start()?;
    let url = redis.url();
    let category = common::category("upgrade");
    let client = pool(&url).await?;
    let _: i64 = client
        .sadd(ordo_redis::internals::names::group_registry(&category), "Old")
        .await?;
    let recorder = Recorder::new();
    let a = broker(&url, config(3_000, 3_600_000, 0)).await?;
    let run = Running::start(&a, vec![subscribe::partitioned("Old", &category, &recorder)]);
    let slot = common::partition(&category, "k").slot();
    eventually(Duration::from_secs(10), "the slot copies written", || {
        let (client, category) = (client.clone(), category.clone());
        async move {
            let copy = ordo_redis::internals::names::group_registry_copy(&category, slot);
            Ok(client.sismember::<bool, _, _>(copy, "Old").await?)
        }
    })
    .await?;
    a.publish(&[publication(&category, "k", 0, Lane::Primary)])
        .await?;
    recorder.wait_seqs("k", &[0]).await?;
    run.stop().await?;
    Ok(())
}

/// One category consumed on a single Redis writes a handful of keys: the
/// group's registration is the category's own registry and joining marker,
/// not a copy of each per hash slot (which were 32,768 keys in `DBSIZE`,
/// alarming an operator); a new stream still gets the group when it is
/// created. (On a Redis Cluster every slot keeps its copies:
/// `a_registration_without_slot_copies_is_redone_at_start`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_category_on_a_single_redis_writes_a_handful_of_keys() -> anyhow::Result<()> {
    use fred::interfaces::ServerInterface;

    // Its own server: `DBSIZE` counts every key of the database.
    let redis = Redis::start_local()?;
    let url = redis.url();
    let category = common::category("small");
    let client = pool(&url).await?;
    let recorder = Recorder::new();
    let a = broker(&url, config(3_000, 3_600_000, 0)).await?;
    let run = Running::start(&a, vec![subscribe::partitioned("Small", &category, &recorder)]);
    let status = ordo_redis::ClusterStatus::new(client.clone(), "backfill");
    eventually(Duration::from_secs(10), "the group registered", || {
        let (status, category) = (status.clone(), category.clone());
        async move { Ok(status.groups(&category).await? == ["Small"]) }
    })
    .await?;
    a.publish(&[
        publication(&category, "a", 0, Lane::Primary),
        publication(&category, "b", 0, Lane::Primary),
    ])
    .await?;
    recorder.wait_seqs("a", &[0]).await?;
    recorder.wait_seqs("b", &[0]).await?;
    let keys: u64 = client.dbsize().await?;
    assert!(
        keys < 100,
        "one category with two keys left {keys} keys in the database"
    );
    run.stop().await?;
    Ok(())
}

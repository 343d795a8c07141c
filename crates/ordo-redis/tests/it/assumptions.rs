//! Stated assumptions are checked: a Redis that may evict Ordo's keys is
//! refused at start-up, and reaping keeps the operator action log.

use crate::common;

use std::time::Duration;

use fred::interfaces::{ClientLike, KeysInterface};
use ordo_core::contract::broker::Broker;
use ordo_core::contract::key::Lane;
use ordo_redis::internals::{HaltReason, Partitions, ReadOutcome, ReapOutcome};
use ordo_redis::{Error, PartitionKeys, RedisBroker};
use ordo_testkit::{Redis, RedisCluster};

use common::{config, pool, publication};

async fn set_policy(client: &fred::clients::Pool, policy: &str) -> anyhow::Result<()> {
    let _: fred::types::Value = client
        .custom(fred::cmd!("CONFIG"), vec!["SET", "maxmemory-policy", policy])
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_redis_that_may_evict_keys_is_refused_unless_allowed() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let client = pool(&redis.url()).await?;
    set_policy(&client, "allkeys-lru").await?;
    let refused = RedisBroker::builder(redis.url()).build().await;
    match refused {
        Err(Error::Config { key, reason }) => {
            assert_eq!(key, "maxmemory-policy");
            assert!(
                reason.contains("allkeys-lru") && reason.contains("noeviction"),
                "{reason}"
            );
        }
        other => panic!("expected the eviction policy to be refused, got {other:?}"),
    }
    RedisBroker::builder(redis.url())
        .allow_eviction(true)
        .build()
        .await?;
    set_policy(&client, "noeviction").await?;
    RedisBroker::builder(redis.url()).build().await?;
    Ok(())
}

#[tokio::test]
async fn reaping_a_partition_keeps_its_operator_action_log() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let url = redis.url();
    let client = pool(&url).await?;
    let category = common::category("log");
    let partition = PartitionKeys::new(&category, "k", "backfill");
    let broker = common::broker(&url, config(15_000, 3_600_000, 0)).await?;
    broker
        .publish(&[publication(&category, "k", 0, Lane::Primary)])
        .await?;
    let owner = Partitions::new(client.clone(), "a", Duration::from_secs(15));
    let lease = owner.acquire("G", &partition).await?.expect("free");
    let ReadOutcome::Entries { entries, .. } = owner.read(&lease, "G", &partition, 10).await? else {
        anyhow::bail!("expected the entry");
    };
    let reason = HaltReason {
        lane: Lane::Primary,
        head: entries[0].id().to_owned(),
        error: "poison".to_owned(),
        attempts: 1,
    };
    owner.halt(&lease, "G", &partition, &reason).await?;
    broker.admin().skip("G", &category, "k").await?;
    assert!(client.exists::<bool, _>(partition.log("G")).await?);

    let reaped = owner.reap(&lease, &partition, Duration::from_millis(1)).await;
    let reaped = match reaped {
        Ok(ReapOutcome::Busy { retry_in }) => {
            tokio::time::sleep(retry_in).await;
            owner.reap(&lease, &partition, Duration::from_millis(1)).await?
        }
        other => other?,
    };
    assert_eq!(reaped, ReapOutcome::Reaped);
    assert!(!client.exists::<bool, _>(partition.primary()).await?);
    assert!(
        client.exists::<bool, _>(partition.log("G")).await?,
        "the operator action log was deleted by the reap"
    );
    client.quit().await?;
    Ok(())
}

#[tokio::test]
async fn on_a_cluster_every_primary_is_checked_for_eviction() -> anyhow::Result<()> {
    let cluster = RedisCluster::start_local()?;
    for evicting in cluster.primaries()? {
        let node = cluster.node(evicting)?;
        let client = pool(&node.url()).await?;
        set_policy(&client, "volatile-lru").await?;
        match RedisBroker::builder(cluster.url()).build().await {
            Err(Error::Config { key, reason }) => {
                assert_eq!(key, "maxmemory-policy");
                assert!(
                    reason.contains(&format!(
                        "is `volatile-lru` on cluster node 127.0.0.1:{}",
                        node.port()
                    )),
                    "{reason}"
                );
            }
            other => panic!("node {evicting}: expected its eviction policy to be refused, got {other:?}"),
        }
        set_policy(&client, "noeviction").await?;
    }
    RedisBroker::builder(cluster.url()).build().await?;
    Ok(())
}

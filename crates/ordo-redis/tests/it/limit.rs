//! `[server.partitioning] max_owned_partitions`: an instance owns at most
//! that many partitions (each costs it memory), the rest are left to other
//! instances' fair shares, or wait until an instance has room.

use crate::common;

use std::time::Duration;

use fred::interfaces::KeysInterface;
use ordo_testkit::{Redis, eventually};

use common::{Recorder, Running, broker, keys, pool, publish_all, subscribe};

/// The test config with a limit on owned partitions (0: none).
fn limited(max_owned_partitions: usize) -> ordo_core::Config {
    let text = format!(
        "[server.partitioning]\n\
         lease_ttl_ms = 3000\n\
         heartbeat_interval_seconds = 0.6\n\
         poll_interval_seconds = 0.1\n\
         discovery_interval_seconds = 0.1\n\
         max_owned_partitions = {max_owned_partitions}\n"
    );
    ordo_core::Config::from_toml_str(&text).expect("test config is valid")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_owns_at_most_max_owned_partitions_and_leaves_the_rest() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("limit");
    let keys = keys(10);
    let client = pool(&url).await?;
    let a = broker(&url, limited(3)).await?;
    publish_all(&a, &category, &keys, 0..1).await?;
    // Who holds each key's lease: (instance a, instance b, nobody).
    let holders = || {
        let client = client.clone();
        let category = category.clone();
        let keys = keys.clone();
        let a = a.instance_id().to_owned();
        async move {
            let mut counts = (0, 0, 0);
            for key in &keys {
                let lease = common::partition(&category, key).lease("P").lease;
                let holder: Option<String> = client.get(&lease).await?;
                match holder {
                    Some(holder) if holder.starts_with(&a) => counts.0 += 1,
                    Some(_) => counts.1 += 1,
                    None => counts.2 += 1,
                }
            }
            anyhow::Ok(counts)
        }
    };

    let recorder_a = Recorder::new();
    let run_a = Running::start(&a, vec![subscribe::partitioned("P", &category, &recorder_a)]);
    eventually(Duration::from_secs(10), "a to own its limit", || async {
        let (owned, _, _) = holders().await?;
        assert!(owned <= 3, "a owns {owned} partitions, over its limit of 3");
        Ok(owned == 3)
    })
    .await?;

    // Another instance without a limit takes its fair share (5 of 10); the
    // 2 left over wait, and a never goes over its limit meanwhile.
    let b = broker(&url, limited(0)).await?;
    let recorder_b = Recorder::new();
    let run_b = Running::start(&b, vec![subscribe::partitioned("P", &category, &recorder_b)]);
    eventually(Duration::from_secs(10), "b to own its fair share", || async {
        let (owned_a, owned_b, free) = holders().await?;
        assert!(owned_a <= 3, "a owns {owned_a} partitions, over its limit of 3");
        Ok((owned_a, owned_b, free) == (3, 5, 2))
    })
    .await?;
    let handled = |recorder: &Recorder| recorder.handled().len();
    eventually(
        Duration::from_secs(10),
        "the owned partitions handled",
        || async { Ok(handled(&recorder_a) == 3 && handled(&recorder_b) == 5) },
    )
    .await?;

    // Once a leaves, b's fair share is everything: nothing waits.
    run_a.stop().await?;
    eventually(Duration::from_secs(15), "b to own every partition", || async {
        Ok(holders().await? == (0, 10, 0))
    })
    .await?;
    eventually(Duration::from_secs(10), "every key handled once", || async {
        Ok(handled(&recorder_a) + handled(&recorder_b) == 10)
    })
    .await?;
    run_b.stop().await?;
    Ok(())
}

#[test]
fn the_limit_is_validated_and_defaults_to_none() {
    let settings = |text: &str| {
        ordo_redis::RedisSettings::from_config(
            &ordo_core::Config::from_toml_str(&format!("[server.partitioning]\n{text}")).unwrap(),
        )
    };
    assert_eq!(settings("").unwrap().max_owned_partitions(), None);
    assert_eq!(
        settings("max_owned_partitions = 0")
            .unwrap()
            .max_owned_partitions(),
        None
    );
    assert_eq!(
        settings("max_owned_partitions = 500")
            .unwrap()
            .max_owned_partitions()
            .map(std::num::NonZeroUsize::get),
        Some(500)
    );
    let error = settings("max_owned_partitions = -1").unwrap_err().to_string();
    assert!(error.contains("max_owned_partitions"), "{error}");
}

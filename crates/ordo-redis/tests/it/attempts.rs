//! The attempt accounting of `close.lua`: a failed attempt is counted with
//! its pending entry once (the retry budget a successor inherits), even when
//! its close reaches Redis twice (resent after a lost reply, or delayed past
//! a retry); a transient failure closes its attempt without counting it.
//! The rule is the protocol model's (`ordo-model`, mutant
//! `count-every-close`).

use crate::common;

use std::time::Duration;

use common::{pool, publish_seqs};
use ordo_redis::PartitionKeys;
use ordo_redis::internals::{Partitions, ReadOutcome};
use ordo_testkit::Redis;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attempt_is_counted_once_and_a_transient_one_not_at_all() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let client = pool(&url).await?;
    let broker = common::broker(&url, common::config(30_000, 3_600_000, 3)).await?;
    let category = common::category("attempts");
    publish_seqs(&broker, &category, "k", 0..1).await?;
    let partition = PartitionKeys::new(&category, "k", "backfill");
    let owner = Partitions::new(client.clone(), "a", Duration::from_secs(30));
    let lease = owner.acquire("G", &partition).await?.expect("a free lease");
    let ReadOutcome::Entries { entries, .. } = owner.read(&lease, "G", &partition, 1).await? else {
        panic!("the entry is read");
    };
    let id = entries[0].id().to_owned();

    // Attempt 1 failed: counted once, whether its close arrives once or twice.
    assert_eq!(owner.attempt_failed(&lease, "G", &partition, &id, 1).await?, 1);
    assert_eq!(
        owner.attempt_failed(&lease, "G", &partition, &id, 1).await?,
        1,
        "a close resent after a lost reply counted the failure again"
    );
    // Attempt 2 failed transiently: closed, not counted.
    owner.close_attempt(&lease, 2).await?;
    assert_eq!(owner.failed_attempts("G", &partition, &id).await?, 1);
    // Attempt 3 failed: counted; the late close of attempt 1 counts nothing.
    assert_eq!(owner.attempt_failed(&lease, "G", &partition, &id, 3).await?, 2);
    assert_eq!(owner.attempt_failed(&lease, "G", &partition, &id, 1).await?, 2);
    assert_eq!(owner.failed_attempts("G", &partition, &id).await?, 2);
    Ok(())
}

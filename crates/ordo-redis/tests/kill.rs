//! A killed worker whose handler run goes on keeps its lease until the run
//! has ended: nobody else runs the key alongside it.
//!
//! The kill (shutdown grace exceeded, or the heartbeat giving up) aborts the
//! handler's task, but an abort only ends a run at its next await: a handler
//! in blocking code goes on. The worker used to release the lease at once
//! anyway, and another instance took the key and ran the same message while
//! the first run was still going. (A run that outlives the lease's TTL:
//! `crates/ordo-harness/tests/shutdown.rs`, with real processes.)

mod common;

use std::sync::Arc;
use std::time::Duration;

use ordo_testkit::Redis;

use common::{Outcome, Recorder, Running, broker, config, publish_seqs, subscribe};
use ordo_testkit::eventually;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_run_in_blocking_code_keeps_the_lease_until_it_ends() -> anyhow::Result<()> {
    common::logs();
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("kill");
    let ttl_ms = 2_000;
    // Shutdown grace is one lease TTL: the run outlives the kill by 1.2 s,
    // less than the TTL the lease still has after its last renewal.
    let recorder = Recorder::with(Arc::new(|_, seq, attempt| {
        if seq == 0 && attempt == 1 {
            Outcome::BlockInPlace(Duration::from_millis(3_200))
        } else {
            Outcome::Succeed
        }
    }));
    let sub = || subscribe::partitioned("K", &category, &recorder);
    let a = broker(&url, config(ttl_ms, 3_600_000, 0)).await?;
    publish_seqs(&a, &category, "k", 0..2).await?;
    let run_a = Running::start(&a, vec![sub()]);
    recorder
        .until(
            Duration::from_secs(10),
            "the blocking run to start",
            Recorder::started,
        )
        .await?;
    let b = broker(&url, config(ttl_ms, 3_600_000, 0)).await?;
    let run_b = Running::start(&b, vec![sub()]);
    // A's shutdown waits a TTL for the run, then kills it.
    run_a.stop().await?;
    eventually(
        Duration::from_secs(15),
        "the other instance to handle both",
        || {
            let recorder = recorder.clone();
            async move {
                let record = recorder.record.lock().unwrap();
                Ok(record.attempts.contains_key(&("k".to_owned(), 1)) && record.in_flight.is_empty())
            }
        },
    )
    .await?;
    assert!(
        recorder.overlaps().is_empty(),
        "another instance ran the key while the killed run was still going"
    );
    run_b.stop().await?;
    Ok(())
}

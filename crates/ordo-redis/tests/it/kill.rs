//! A killed worker whose handler run goes on keeps its lease until the run
//! has ended: nobody else runs the key alongside it.
//!
//! The kill (shutdown grace exceeded, or the heartbeat giving up) aborts the
//! handler's task, but an abort only ends a run at its next await: a handler
//! in blocking code goes on. The worker used to release the lease at once
//! anyway, and another instance took the key and ran the same message while
//! the first run was still going. (A run that outlives the lease's TTL:
//! `crates/ordo-harness/tests/it/shutdown.rs`, with real processes.)

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use ordo_testkit::Redis;

use common::{Outcome, Recorder, Running, broker, config, publish_seqs, subscribe};
use ordo_redis::RedisBroker;
use ordo_testkit::eventually;

/// A broker on `url` (lease TTL `ttl_ms`) running handler `K` on
/// `category`, whose first run of key `k`'s message 0 blocks in blocking
/// code (`Outcome::BlockInPlace` or `BlockInPlaceAtStart`); messages 0 and
/// 1 published, and that run started.
async fn a_blocking_run_started(
    url: &str,
    category: &str,
    ttl_ms: u64,
    block: Outcome,
) -> anyhow::Result<(RedisBroker, Recorder, Running)> {
    let recorder = Recorder::with(Arc::new(move |_, seq, attempt| {
        if seq == 0 && attempt == 1 {
            block
        } else {
            Outcome::Succeed
        }
    }));
    let a = broker(url, config(ttl_ms, 3_600_000, 0)).await?;
    publish_seqs(&a, category, "k", 0..2).await?;
    let run = Running::start(&a, vec![subscribe::partitioned("K", category, &recorder)]);
    recorder
        .until(
            Duration::from_secs(10),
            "the blocking run to start",
            Recorder::started,
        )
        .await?;
    Ok((a, recorder, run))
}

/// Waits until the other instance has handled key `k`'s message 1 and
/// nothing of `k` is running, and checks that no two runs of `k` overlapped.
async fn the_other_instance_handles_message_1_alone(recorder: &Recorder) -> anyhow::Result<()> {
    eventually(
        Duration::from_secs(15),
        "the other instance to handle message 1",
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
        "another instance ran the key while the first instance's run was still going"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_run_in_blocking_code_keeps_the_lease_until_it_ends() -> anyhow::Result<()> {
    common::logs();
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("kill");
    let ttl_ms = 2_000;
    // Shutdown grace is one lease TTL: the run outlives the kill by 1.2 s,
    // less than the TTL the lease still has after its last renewal.
    let (_a, recorder, run_a) = a_blocking_run_started(
        &url,
        &category,
        ttl_ms,
        Outcome::BlockInPlace(Duration::from_millis(3_200)),
    )
    .await?;
    let sub = || subscribe::partitioned("K", &category, &recorder);
    let b = broker(&url, config(ttl_ms, 3_600_000, 0)).await?;
    let run_b = Running::start(&b, vec![sub()]);
    // A's shutdown waits a TTL for the run, then kills it.
    run_a.stop().await?;
    the_other_instance_handles_message_1_alone(&recorder).await?;
    run_b.stop().await?;
    Ok(())
}

/// A run in blocking code before it first waits is on its worker's own
/// task (a run that never waits costs no task of its own): nothing can
/// abort it there, so the shutdown waits for it, the worker holding its
/// lease until the run has returned; the other instance takes the key only
/// then, with no overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_blocking_before_it_first_waits_holds_its_shutdown_and_its_lease_until_it_ends()
-> anyhow::Result<()> {
    common::logs();
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("kill");
    let ttl_ms = 1_000;
    let block = Duration::from_millis(2_500);
    let (_a, recorder, run_a) =
        a_blocking_run_started(&url, &category, ttl_ms, Outcome::BlockInPlaceAtStart(block)).await?;
    let started = std::time::Instant::now();
    let b = broker(&url, config(ttl_ms, 3_600_000, 0)).await?;
    let run_b = Running::start(&b, vec![subscribe::partitioned("K", &category, &recorder)]);
    run_a.stop().await?;
    assert!(
        !recorder.record.lock().unwrap().in_flight.contains("k"),
        "the shutdown returned while the run was still going"
    );
    assert!(started.elapsed() > Duration::from_millis(ttl_ms));
    the_other_instance_handles_message_1_alone(&recorder).await?;
    let seqs = recorder.seqs("k");
    assert!(seqs.starts_with(&[0]) && seqs.ends_with(&[1]), "{seqs:?}");
    run_b.stop().await?;
    Ok(())
}

/// A run its shutdown gave up on keeps the instance's lease for as long as
/// it goes on, beyond the lease's TTL; meanwhile a new consumer of the same
/// broker (the same instance, which would take the lease back as its own)
/// is refused. Once the run has ended the lease is released and the broker
/// runs again, handling the key's messages in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_restarted_while_a_run_outlives_its_shutdown_waits_for_the_run() -> anyhow::Result<()> {
    use fred::interfaces::KeysInterface;
    use ordo_core::contract::broker::Broker;

    common::logs();
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("linger");
    let ttl_ms = 1_000;
    // The shutdown grace is one TTL: the run outlives its shutdown by about
    // two TTLs.
    let (a, recorder, run) = a_blocking_run_started(
        &url,
        &category,
        ttl_ms,
        Outcome::BlockInPlace(Duration::from_millis(3_000)),
    )
    .await?;
    let sub = || subscribe::partitioned("K", &category, &recorder);
    run.stop().await?;
    let stopped = std::time::Instant::now();

    let client = common::pool(&url).await?;
    let lease = common::partition(&category, "k").lease("K").lease;
    let held: Option<String> = client.get(&lease).await?;
    let held = held.expect("the lease is held while the run goes on");
    let refused = |cancelled: tokio_util::sync::CancellationToken| {
        let a = a.clone();
        let sub = sub();
        async move { a.run(vec![sub].into(), cancelled).await }
    };
    let cancelled = tokio_util::sync::CancellationToken::new();
    cancelled.cancel();
    let error = refused(cancelled.clone())
        .await
        .expect_err("a consumer of the instance is refused while its run goes on");
    assert!(
        matches!(
            error.downcast_ref::<ordo_redis::Error>(),
            Some(ordo_redis::Error::AlreadyRunning { .. })
        ),
        "{error}"
    );
    // Past the TTL, the run still going: the lease is still this one.
    while recorder.record.lock().unwrap().in_flight.contains("k") {
        let now: Option<String> = client.get(&lease).await?;
        assert_eq!(
            now.as_deref(),
            Some(held.as_str()),
            "{:?} after the shutdown, with the run still going",
            stopped.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        stopped.elapsed() > Duration::from_millis(ttl_ms),
        "the run ended within a TTL of the shutdown: nothing was shown"
    );
    eventually(
        Duration::from_secs(10),
        "the lease released once the run ended, and the broker free to run again",
        || {
            let (client, lease, refused, cancelled) =
                (client.clone(), lease.clone(), refused, cancelled.clone());
            async move {
                let now: Option<String> = client.get(&lease).await?;
                Ok(now.is_none() && refused(cancelled).await.is_ok())
            }
        },
    )
    .await?;
    let run = Running::start(&a, vec![sub()]);
    // The aborted run of 0 finished its work (nothing in it awaits after
    // the blocking code); 0 runs again, as the message in flight at a
    // failover does, then 1.
    recorder.wait_seqs("k", &[0, 0, 1]).await?;
    assert!(recorder.overlaps().is_empty(), "{:?}", recorder.overlaps());
    run.stop().await?;
    Ok(())
}

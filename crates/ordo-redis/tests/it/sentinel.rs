//! Redis Sentinel: two workers on a `redis-sentinel://` URL keep per-key
//! order while `SENTINEL FAILOVER` moves the primary under them; no key is
//! handled by two workers at once, and nothing that was acknowledged before
//! the failover (or after it completed) is lost.

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ordo_core::contract::broker::Broker;
use ordo_core::contract::handler::HandlerKind;
use ordo_core::contract::key::Lane;
use ordo_testkit::{RedisSentinel, eventually};

use common::{Recorder, Running, broker, config, publication, subscription};

/// Keys published to.
const KEYS: usize = 6;
/// The sequence number after whose publication (on every key) the failover starts.
const FAILOVER_AT: u64 = 15;
/// How many more messages per key are published once the failover completed.
const AFTER: u64 = 15;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_on_a_sentinel_url_keep_the_guarantee_across_a_failover() -> anyhow::Result<()> {
    let topology = Arc::new(tokio::task::spawn_blocking(RedisSentinel::start).await??);
    let url = topology.url();
    let category = common::category("sentinel");
    let keys: Vec<String> = (0..KEYS).map(|k| format!("k{k}")).collect();
    let recorder = Recorder::new();
    let settings = config(3_000, 0, 3);
    let workers = [
        broker(&url, settings.clone()).await?,
        broker(&url, settings.clone()).await?,
    ];
    let runs: Vec<Running> = workers
        .iter()
        .map(|worker| {
            Running::start(
                worker,
                vec![subscription(
                    "Keeper",
                    HandlerKind::Event,
                    &[&category],
                    true,
                    Arc::new(recorder.clone()),
                )],
            )
        })
        .collect();
    let publisher = broker(&url, settings).await?;

    // Each publication is retried (the same message, so a retry after a
    // lost reply is dropped as a duplicate) until Redis acknowledges it.
    // `acked[key][seq]` is the phase it was acknowledged in: 0 before the
    // failover started, 1 during it, 2 after it completed.
    let phase = Arc::new(Mutex::new(0u8));
    let acked: Arc<Mutex<BTreeMap<(String, u64), u8>>> = Arc::default();
    let failover_started = Arc::new(tokio::sync::Notify::new());
    let publishing = {
        let (category, keys, phase, acked, started) = (
            category.clone(),
            keys.clone(),
            phase.clone(),
            acked.clone(),
            failover_started.clone(),
        );
        tokio::spawn(async move {
            let mut completed_at = None;
            for seq in 0.. {
                if *phase.lock().unwrap() == 2 {
                    let completed = *completed_at.get_or_insert(seq);
                    if seq >= completed + AFTER {
                        return anyhow::Ok(seq);
                    }
                }
                for key in &keys {
                    let message = publication(&category, key, seq, Lane::Primary);
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
                    loop {
                        match publisher.publish(std::slice::from_ref(&message)).await {
                            Ok(()) => break,
                            Err(error) if tokio::time::Instant::now() < deadline => {
                                tracing::debug!(%error, "publish failed; retrying");
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            Err(error) => {
                                return Err(anyhow::anyhow!("{key}/{seq} never published: {error}"));
                            }
                        }
                    }
                    let at = *phase.lock().unwrap();
                    acked.lock().unwrap().insert((key.clone(), seq), at);
                }
                if seq == FAILOVER_AT {
                    started.notify_one();
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            unreachable!("the loop returns once the failover completed")
        })
    };

    failover_started.notified().await;
    let before = topology.primary_port()?;
    *phase.lock().unwrap() = 1;
    let failing_over = topology.clone();
    let started = std::time::Instant::now();
    tokio::task::spawn_blocking(move || failing_over.failover()).await??;
    let failover = started.elapsed();
    *phase.lock().unwrap() = 2;
    assert_ne!(topology.primary_port()?, before, "the replica is the primary now");
    let per_key = publishing.await??;

    // Everything acknowledged outside the failover window is handled.
    let acked = acked.lock().unwrap().clone();
    let must = |key: &str| -> Vec<u64> {
        acked
            .iter()
            .filter(|((k, _), phase)| k == key && **phase != 1)
            .map(|((_, seq), _)| *seq)
            .collect()
    };
    eventually(
        Duration::from_secs(60),
        "every acknowledged message handled",
        || {
            let done = keys.iter().all(|key| {
                let seqs = recorder.seqs(key);
                must(key).iter().all(|seq| seqs.contains(seq))
            });
            async move { Ok(done) }
        },
    )
    .await?;
    for run in runs {
        run.stop().await?;
    }

    assert_eq!(
        recorder.overlaps(),
        Vec::<String>::new(),
        "a key was handled twice at once"
    );
    let mut lost_in_window = 0;
    for key in &keys {
        // Redelivery may repeat a message; the first deliveries keep order.
        let mut first: Vec<u64> = Vec::new();
        for seq in recorder.seqs(key) {
            if !first.contains(&seq) {
                first.push(seq);
            }
        }
        assert!(
            first.windows(2).all(|pair| pair[0] < pair[1]),
            "{key} handled out of order: {first:?}"
        );
        lost_in_window += (0..per_key).filter(|seq| !first.contains(seq)).count();
    }
    // Only what the old primary acknowledged during the failover can be
    // lost (asserted above: everything else was handled).
    let in_window = acked.values().filter(|phase| **phase == 1).count();
    // Added before subtracting: with messages lost, the runs are fewer than
    // the messages (the subtraction first overflowed).
    let redelivered: usize = keys.iter().map(|key| recorder.seqs(key).len()).sum::<usize>() + lost_in_window
        - keys.len() * usize::try_from(per_key)?;
    eprintln!(
        "failover (until the old primary was a replica in sync): {failover:?}; messages per key: \
         {per_key}; acknowledged during the failover: {in_window}; lost of those: {lost_in_window}; \
         handled again: {redelivered}"
    );
    Ok(())
}

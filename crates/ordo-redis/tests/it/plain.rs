//! Plain (non-partitioned) consumers: entries are claimed only from dead
//! instances, a panicking handler does not end the consumer, and a retry's
//! backoff ends at shutdown. Plus the partition worker's retry budget, kept
//! with the pending entry across a stop.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fred::interfaces::{KeysInterface, StreamsInterface};
use fred::types::Value;
use ordo_core::DynHandler;
use ordo_core::contract::broker::{Broker, Publication};
use ordo_core::contract::handler::{BoxFuture, HandlerContext, HandlerKind, HandlerResult};
use ordo_core::contract::key::Lane;
use ordo_core::contract::message::Envelope;
use ordo_testkit::Redis;

use common::topology::TestRedis;
use common::{Outcome, Recorder, Running, broker, config, envelope, pool, seq_of, subscribe, subscription};
use ordo_testkit::eventually;

fn base(category: &str, seq: u64) -> Publication {
    Publication::to_base(envelope(category, "Happened", None, seq))
}

fn attempts(recorder: &Recorder, seq: u64) -> u32 {
    recorder
        .record
        .lock()
        .unwrap()
        .attempts
        .get(&(String::new(), seq))
        .copied()
        .unwrap_or(0)
}

// The reported case: 20 messages, no fault at all, two instances; the one
// that read the batch works through it slowly. Its entries used to be
// claimed by the other once they had been pending a lease TTL: 33 runs.
crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_live_instance_slowly_working_through_its_batch_keeps_its_entries
);

async fn a_live_instance_slowly_working_through_its_batch_keeps_its_entries(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("plain");
    let recorder = Recorder::with(Arc::new(|_, _, _| Outcome::Slow(Duration::from_millis(120))));
    let sub = || subscribe::plain("Plain", &category, &recorder);
    let a = broker(&url, config(1_000, 3_600_000, 0)).await?;
    a.publish(&(0..20).map(|seq| base(&category, seq)).collect::<Vec<_>>())
        .await?;
    let run_a = Running::start(&a, vec![sub()]);
    eventually(Duration::from_secs(10), "the first run", || async {
        Ok(attempts(&recorder, 0) == 1)
    })
    .await?;
    let b = broker(&url, config(1_000, 3_600_000, 0)).await?;
    let run_b = Running::start(&b, vec![sub()]);
    eventually(Duration::from_secs(20), "all 20 handled", || async {
        Ok((0..20).all(|seq| attempts(&recorder, seq) >= 1))
    })
    .await?;
    // Time for more claim passes of the other instance.
    let client = pool(&url).await?;
    eventually(Duration::from_secs(10), "nothing pending", || async {
        let summary: Value = client.xpending(&category, "Plain", ()).await?;
        Ok(summary.into_array().first().and_then(Value::as_i64) == Some(0))
    })
    .await?;
    let runs: u32 = (0..20).map(|seq| attempts(&recorder, seq)).sum();
    assert_eq!(runs, 20, "a live instance's entries were claimed and run again");
    run_a.stop().await?;
    run_b.stop().await?;
    Ok(())
}

/// Panics on the first attempt of seq 0.
struct Panicky {
    panicked: AtomicBool,
    handled: std::sync::Mutex<Vec<u64>>,
}

impl DynHandler for Panicky {
    fn handle<'a>(&'a self, message: &'a Envelope, _: &'a HandlerContext) -> BoxFuture<'a, HandlerResult> {
        Box::pin(async move {
            let seq = seq_of(message);
            if seq == 0 && !self.panicked.swap(true, Ordering::SeqCst) {
                panic!("seq 0 is cursed");
            }
            self.handled.lock().unwrap().push(seq);
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_plain_handler_does_not_end_its_consumer() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("plain");
    let handler = Arc::new(Panicky {
        panicked: AtomicBool::new(false),
        handled: std::sync::Mutex::default(),
    });
    let a = broker(&url, config(3_000, 3_600_000, 2)).await?;
    let run = Running::start(
        &a,
        vec![subscription(
            "Plain",
            HandlerKind::Event,
            &[&category],
            false,
            handler.clone(),
        )],
    );
    a.publish(&[base(&category, 0), base(&category, 1)]).await?;
    eventually(Duration::from_secs(10), "both handled", || async {
        Ok(*handler.handled.lock().unwrap() == [0, 1])
    })
    .await?;
    assert!(handler.panicked.load(Ordering::SeqCst));
    run.stop().await?;
    Ok(())
}

fn slow_retries(max_retries: u32) -> ordo_core::contract::config::Config {
    ordo_core::contract::config::Config::from_toml_str(&format!(
        "[server.partitioning]\n\
         lease_ttl_ms = 3000\n\
         poll_interval_seconds = 0.1\n\
         discovery_interval_seconds = 0.1\n\
         max_retries = {max_retries}\n\
         retry_backoff_initial_ms = 30000\n\
         retry_backoff_max_ms = 30000\n"
    ))
    .expect("test config is valid")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_retry_backoff_ends_at_shutdown_and_leaves_the_entry_pending() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("plain");
    let recorder = Recorder::with(Arc::new(|_, _, _| Outcome::Fail));
    let a = broker(&url, slow_retries(3)).await?;
    let run = Running::start(&a, vec![subscribe::plain("Plain", &category, &recorder)]);
    a.publish(&[base(&category, 0)]).await?;
    eventually(Duration::from_secs(10), "the first attempt", || async {
        Ok(attempts(&recorder, 0) == 1)
    })
    .await?;
    tokio::time::timeout(Duration::from_secs(5), run.stop())
        .await
        .map_err(|_| anyhow::anyhow!("the retry's backoff held the shutdown"))??;
    let client = pool(&url).await?;
    let summary: Value = client.xpending(&category, "Plain", ()).await?;
    assert_eq!(
        summary.into_array().first().and_then(Value::as_i64),
        Some(1),
        "left pending"
    );
    assert!(!client.exists::<bool, _>(format!("{category}:dlq")).await?);
    Ok(())
}

/// A partition worker stopped during the backoff after a failed attempt
/// used to leave no trace of it: the next owner started the retry budget
/// afresh, so a poison message ran more often than `max_retries + 1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_the_backoff_does_not_renew_the_retry_budget() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    common::logs();
    let category = common::category("budget");
    let recorder = Recorder::with(Arc::new(|_, _, _| Outcome::Fail));
    let sub = || subscribe::partitioned("Budget", &category, &recorder);
    let a = broker(&url, slow_retries(2)).await?;
    a.publish(&[common::publication(&category, "k", 0, Lane::Primary)])
        .await?;
    let run_a = Running::start(&a, vec![sub()]);
    let tries = |recorder: &Recorder| recorder.attempts("k", 0).unwrap_or(0);
    eventually(Duration::from_secs(10), "the first attempt", || async {
        Ok(tries(&recorder) == 1)
    })
    .await?;
    // Stopped in the 30 s backoff: the message stays pending.
    tokio::time::timeout(Duration::from_secs(5), run_a.stop())
        .await
        .map_err(|_| anyhow::anyhow!("the backoff held the shutdown"))??;

    // The next owner retries with a short backoff: 2 attempts are left.
    let b = broker(&url, config(3_000, 3_600_000, 2)).await?;
    let run_b = Running::start(&b, vec![sub()]);
    let admin = b.admin();
    eventually(Duration::from_secs(10), "the partition to halt", || async {
        Ok(!admin.halted().await?.is_empty())
    })
    .await?;
    let halted = admin.halted().await?;
    assert_eq!(tries(&recorder), 3, "max_retries 2: three attempts in all");
    assert_eq!(halted[0].attempts, 3);
    run_b.stop().await?;
    Ok(())
}

// A plain consumer's claim of a dead instance's entries, and a partitioned
// handler beside it in one consumer. On Redis Cluster the claim named the
// base stream and the group's instance set (two slots) in one call: it
// failed at every pass (the entries stayed pending forever), and discovery
// of the partitioned handler's partitions failed with it.
crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_dead_instances_entries_are_claimed_beside_a_partitioned_handler
);

async fn a_dead_instances_entries_are_claimed_beside_a_partitioned_handler(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let plain_category = common::category("plain");
    let keyed_category = common::category("keyed");
    let recorder = Recorder::new();
    let a = broker(&url, config(1_000, 3_600_000, 0)).await?;
    a.publish(&(0..5).map(|seq| base(&plain_category, seq)).collect::<Vec<_>>())
        .await?;
    // An instance that is gone read them all and never acknowledged them.
    let client = pool(&url).await?;
    let _: Value = client.xgroup_create(&plain_category, "Plain", "0", true).await?;
    let _: Value = client
        .xreadgroup(
            "Plain",
            "a-gone-instance",
            Some(10),
            None,
            false,
            &plain_category,
            ">",
        )
        .await?;
    let run = Running::start(
        &a,
        vec![
            subscribe::plain("Plain", &plain_category, &recorder),
            subscribe::partitioned("Keyed", &keyed_category, &recorder),
        ],
    );
    a.publish(&[common::publication(&keyed_category, "k-1", 1, Lane::Primary)])
        .await?;
    eventually(
        Duration::from_secs(15),
        "the dead instance's entries handled",
        || async { Ok((0..5).all(|seq| attempts(&recorder, seq) >= 1)) },
    )
    .await?;
    recorder.wait_seqs("k-1", &[1]).await?;
    run.stop().await?;
    Ok(())
}

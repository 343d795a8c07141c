//! What operators rely on, on a real Redis: `reap_idle_ms = 0` never
//! retires a partition, per-handler `max_retries` means the same number of
//! attempts as on the inline broker (N + 1), for keyed and plain groups,
//! and a handler's own `max_concurrency` bounds its runs.

use crate::common;

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fred::interfaces::{KeysInterface, SetsInterface, StreamsInterface};
use fred::types::Value;
use ordo_core::DynHandler;
use ordo_core::contract::broker::{Broker, HandlerSettings, Publication, Subscription};
use ordo_core::contract::config::HandlerConfig;
use ordo_core::contract::handler::{BoxFuture, HandlerContext, HandlerKind, HandlerResult};
use ordo_core::contract::key::Lane;
use ordo_core::contract::message::Envelope;
use ordo_redis::PartitionKeys;
use ordo_testkit::Redis;

use common::{
    Outcome, Recorder, Running, broker, config, envelope, pool, publication, subscribe, subscription,
};
use ordo_testkit::eventually;

fn with_settings(mut subscription: Subscription, settings: HandlerConfig) -> Subscription {
    subscription.settings = HandlerSettings::new(settings);
    subscription
}

fn attempts(recorder: &Recorder, key: &str, seq: u64) -> u32 {
    let record = recorder.record.lock().unwrap();
    record.attempts.get(&(key.to_owned(), seq)).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reap_idle_ms_zero_never_retires_a_drained_partition() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let client = pool(&url).await?;
    let kept = common::category("kept");
    let reaped = common::category("reaped");

    let never = broker(&url, config(3_000, 0, 0)).await?;
    let kept_recorder = Recorder::new();
    let run_never = Running::start(
        &never,
        vec![subscribe::partitioned("Never", &kept, &kept_recorder)],
    );
    never
        .publish(&[publication(&kept, "k", 0, Lane::Primary)])
        .await?;
    kept_recorder.wait_seqs("k", &[0]).await?;

    // A partition drained after the kept one, on a broker that reaps after
    // 300 ms: once it is gone, the kept one has been idle for longer.
    let reaping = broker(&url, config(3_000, 300, 0)).await?;
    let reaped_recorder = Recorder::new();
    let run_reaping = Running::start(
        &reaping,
        vec![subscribe::partitioned("Reaping", &reaped, &reaped_recorder)],
    );
    reaping
        .publish(&[publication(&reaped, "k", 0, Lane::Primary)])
        .await?;
    let reaped_index = PartitionKeys::new(&reaped, "k", "backfill").index();
    eventually(Duration::from_secs(10), "the other partition retired", || {
        let (client, index, recorder) = (client.clone(), reaped_index.clone(), reaped_recorder.clone());
        async move {
            let members: Vec<String> = client.smembers(&index).await?;
            Ok(recorder.seqs("k") == [0] && members.is_empty())
        }
    })
    .await?;

    let partition = PartitionKeys::new(&kept, "k", "backfill");
    let members: Vec<String> = client.smembers(partition.index()).await?;
    assert_eq!(members, ["k"], "the never-reaped partition is still indexed");
    assert!(
        client.exists::<bool, _>(partition.primary()).await?,
        "and its stream is kept"
    );
    run_never.stop().await?;
    run_reaping.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_max_retries_means_n_plus_one_attempts_for_keyed_and_plain_groups() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let client = pool(&url).await?;
    let keyed = common::category("keyed");
    let plain = common::category("plain");
    let failing = || Recorder::with(Arc::new(|_, _, _| Outcome::Fail));
    let (keyed_own, keyed_default, plain_own) = (failing(), failing(), failing());
    // The broker's default: max_retries = 3.
    let redis_broker = broker(&url, config(3_000, 3_600_000, 3)).await?;
    let run = Running::start(
        &redis_broker,
        vec![
            with_settings(
                subscribe::partitioned("KeyedOwn", &keyed, &keyed_own),
                HandlerConfig::new().with_max_retries(1),
            ),
            subscribe::partitioned("KeyedDefault", &keyed, &keyed_default),
            with_settings(
                subscribe::plain("PlainOwn", &plain, &plain_own),
                HandlerConfig::new().with_max_retries(0),
            ),
        ],
    );
    redis_broker
        .publish(&[
            publication(&keyed, "k", 0, Lane::Primary),
            Publication::to_base(envelope(&plain, "Happened", None, 0)),
        ])
        .await?;
    let admin = redis_broker.admin();
    eventually(Duration::from_secs(15), "both keyed groups halted", || {
        let admin = admin.clone();
        async move { Ok(admin.halted().await?.len() == 2) }
    })
    .await?;
    let dlq = format!("{plain}:dlq");
    eventually(Duration::from_secs(15), "the plain message dead-lettered", || {
        let (client, dlq) = (client.clone(), dlq.clone());
        async move { Ok(client.xlen::<u64, _>(&dlq).await? == 1) }
    })
    .await?;
    assert_eq!(attempts(&keyed_own, "k", 0), 2, "max_retries = 1: two attempts");
    assert_eq!(
        attempts(&keyed_default, "k", 0),
        4,
        "the broker's max_retries = 3: four attempts"
    );
    assert_eq!(attempts(&plain_own, "", 0), 1, "max_retries = 0: one attempt");
    let halted = admin.halted().await?;
    let recorded = |group: &str| halted.iter().find(|h| h.group == group).map(|h| h.attempts);
    assert_eq!(recorded("KeyedOwn"), Some(2));
    assert_eq!(recorded("KeyedDefault"), Some(4));
    let entries: Value = client.xrange(&dlq, "-", "+", None).await?;
    assert!(format!("{entries:?}").contains("PlainOwn"), "{entries:?}");
    run.stop().await?;
    Ok(())
}

/// Counts the runs in flight at once.
#[derive(Clone, Default)]
struct Gauge {
    now: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
    done: Arc<AtomicUsize>,
}

impl DynHandler for Gauge {
    fn handle<'a>(&'a self, _: &'a Envelope, _: &'a HandlerContext) -> BoxFuture<'a, HandlerResult> {
        Box::pin(async move {
            let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.max.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.now.fetch_sub(1, Ordering::SeqCst);
            self.done.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_max_concurrency_bounds_its_runs_across_partitions() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("bounded");
    let (bounded, free) = (Gauge::default(), Gauge::default());
    let redis_broker = broker(&url, config(3_000, 3_600_000, 0)).await?;
    let run = Running::start(
        &redis_broker,
        vec![
            with_settings(
                subscribe::partitioned("Bounded", &category, &bounded),
                HandlerConfig::new().with_max_concurrency(NonZeroUsize::new(2).unwrap()),
            ),
            subscribe::partitioned("Free", &category, &free),
        ],
    );
    let publications: Vec<Publication> = (0..8)
        .flat_map(|key| (0..3).map(move |seq| (key, seq)))
        .map(|(key, seq)| publication(&category, &format!("k{key}"), seq, Lane::Primary))
        .collect();
    redis_broker.publish(&publications).await?;
    eventually(Duration::from_secs(20), "every message handled by both", || {
        let (bounded, free) = (bounded.clone(), free.clone());
        async move { Ok(bounded.done.load(Ordering::SeqCst) == 24 && free.done.load(Ordering::SeqCst) == 24) }
    })
    .await?;
    assert!(
        bounded.max.load(Ordering::SeqCst) <= 2,
        "{}",
        bounded.max.load(Ordering::SeqCst)
    );
    assert!(
        free.max.load(Ordering::SeqCst) > 2,
        "the unbounded handler ran its keys in parallel"
    );
    run.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_unknown_while_redis_is_unreachable() -> anyhow::Result<()> {
    let mut redis = Redis::builder().append_only(true).start()?;
    let url = redis.url();
    let category = common::category("order");
    let redis_broker = broker(&url, config(3_000, 3_600_000, 0)).await?;
    let subscriptions = [subscription(
        "P",
        HandlerKind::Event,
        &[&category],
        true,
        Arc::new(Recorder::new()),
    )];
    let thresholds = *ordo_core::contract::config::Config::default().health();
    let health = redis_broker.health(&subscriptions, &thresholds).await;
    assert_eq!(health[0].state, ordo_core::HealthState::Ok, "{health:?}");

    redis.kill()?;
    let health = redis_broker.health(&subscriptions, &thresholds).await;
    assert_eq!(health[0].state, ordo_core::HealthState::Unknown, "{health:?}");
    assert!(
        health[0].reasons[0].starts_with("Redis unreachable: "),
        "{health:?}"
    );

    redis.restart()?;
    eventually(Duration::from_secs(15), "health back to ok", || {
        let (broker, subscriptions) = (redis_broker.clone(), subscriptions.clone());
        async move { Ok(broker.health(&subscriptions, &thresholds).await[0].state == ordo_core::HealthState::Ok) }
    })
    .await?;
    Ok(())
}

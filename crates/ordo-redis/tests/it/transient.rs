//! A dependency outage is not a poison message, on the Redis broker: the
//! per-key worker, hashed partitions and plain consumers retry transient
//! failures without using up `max_retries` (nothing halts, parks or is
//! dead-lettered, nothing is counted in Redis, every key stays in order),
//! a handler most of whose keys fail transiently pauses and says so in
//! Redis (`ordo status`, health), and an attempt that hangs is cancelled at
//! its timeout while its key waits for the run to end.
//!
//! `max_retries = 0` everywhere: on the old code the first failed attempt
//! of each message halted its key (or dead-lettered it).

use crate::common;

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::interfaces::{HashesInterface, StreamsInterface};
use ordo_core::DynHandler;
use ordo_core::contract::broker::Broker;
use ordo_core::contract::handler::{BoxFuture, HandlerContext, HandlerResult};
use ordo_core::contract::health::HealthState;
use ordo_core::contract::message::Envelope;
use ordo_core::{Config, Partitions};
use ordo_redis::{ClusterStatus, PartitionId, PartitionKeys};
use ordo_testkit::Redis;

use common::{Running, broker, keys, pool, publish_all, seq_of, subscribe};

const GROUP: &str = "Projector";

/// Fast timings, `max_retries = 0` unless `extra` sets it, and `extra`.
fn config(extra: &str) -> Config {
    let retries = if extra.contains("max_retries") {
        ""
    } else {
        "max_retries = 0\n"
    };
    Config::from_toml_str(&format!(
        "[server.partitioning]\n\
         lease_ttl_ms = 6000\n\
         heartbeat_interval_seconds = 1.2\n\
         poll_interval_seconds = 0.1\n\
         discovery_interval_seconds = 0.1\n\
         {retries}{extra}"
    ))
    .expect("test config is valid")
}

/// What one attempt does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    Succeed,
    /// Fails as a refused connection does.
    Transient,
    /// Awaits for ever.
    Hang,
    /// Blocks its thread (ignoring an abort) this long, then awaits a
    /// little, where an abort takes effect.
    BlockThenAwait(Duration),
}

/// One attempt as the handler saw it.
#[derive(Debug, Clone)]
struct Attempt {
    key: String,
    seq: u64,
    attempt: u32,
    token: u64,
    started: Instant,
    ended: Option<Instant>,
    succeeded: bool,
}

type Plan = Arc<dyn Fn(&str, u64, usize) -> Act + Send + Sync>;

/// A handler whose dependency may be down: `plan(key, seq, nth run of the
/// message)` decides each attempt, and an outage fails every attempt
/// transiently until it ends.
#[derive(Clone)]
struct Dependent {
    down: Arc<AtomicBool>,
    plan: Plan,
    attempts: Arc<Mutex<Vec<Attempt>>>,
}

impl Dependent {
    fn new(plan: impl Fn(&str, u64, usize) -> Act + Send + Sync + 'static) -> Self {
        Self {
            down: Arc::default(),
            plan: Arc::new(plan),
            attempts: Arc::default(),
        }
    }

    fn succeeding() -> Self {
        Self::new(|_, _, _| Act::Succeed)
    }

    fn outage(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    fn attempts(&self) -> Vec<Attempt> {
        self.attempts.lock().unwrap().clone()
    }

    /// The seqs handled successfully per key, in order.
    fn handled(&self) -> BTreeMap<String, Vec<u64>> {
        let mut handled: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for attempt in self.attempts().into_iter().filter(|a| a.succeeded) {
            handled.entry(attempt.key).or_default().push(attempt.seq);
        }
        handled
    }

    /// Attempts of one key that ran at the same time.
    fn overlaps(&self) -> usize {
        let attempts = self.attempts();
        let mut overlaps = 0;
        for (i, a) in attempts.iter().enumerate() {
            for b in &attempts[i + 1..] {
                let a_end = a.ended.unwrap_or_else(Instant::now);
                if a.key == b.key && b.started < a_end && a.started < b.ended.unwrap_or_else(Instant::now) {
                    overlaps += 1;
                }
            }
        }
        overlaps
    }

    async fn until(
        &self,
        deadline: Duration,
        what: &str,
        condition: impl Fn(&Self) -> bool,
    ) -> anyhow::Result<()> {
        ordo_testkit::eventually(deadline, what, || {
            let done = condition(self);
            async move { Ok(done) }
        })
        .await?;
        Ok(())
    }
}

impl DynHandler for Dependent {
    fn handle<'a>(&'a self, message: &'a Envelope, ctx: &'a HandlerContext) -> BoxFuture<'a, HandlerResult> {
        Box::pin(async move {
            let key = message.partition_key.clone().unwrap_or_default();
            let seq = seq_of(message);
            let (index, nth) = {
                let mut attempts = self.attempts.lock().unwrap();
                let nth = attempts.iter().filter(|a| a.key == key && a.seq == seq).count();
                attempts.push(Attempt {
                    key: key.clone(),
                    seq,
                    attempt: ctx.attempt(),
                    token: ctx.fencing_token(),
                    started: Instant::now(),
                    ended: None,
                    succeeded: false,
                });
                (attempts.len() - 1, nth)
            };
            let act = if self.down.load(Ordering::SeqCst) {
                Act::Transient
            } else {
                (self.plan)(&key, seq, nth)
            };
            let end = |succeeded: bool| {
                let mut attempts = self.attempts.lock().unwrap();
                attempts[index].ended = Some(Instant::now());
                attempts[index].succeeded = succeeded;
            };
            match act {
                Act::Succeed => {}
                Act::Transient => {
                    end(false);
                    let refused = std::io::Error::new(
                        std::io::ErrorKind::ConnectionRefused,
                        "connection refused (the ledger service is down)",
                    );
                    return Err(refused.into());
                }
                Act::Hang => {
                    // Ended as far as the key is concerned once cancelled.
                    struct Ended<F: FnMut()>(F);
                    impl<F: FnMut()> Drop for Ended<F> {
                        fn drop(&mut self) {
                            (self.0)();
                        }
                    }
                    let _ended = Ended(|| end(false));
                    std::future::pending::<()>().await;
                }
                Act::BlockThenAwait(duration) => {
                    tokio::task::block_in_place(|| std::thread::sleep(duration));
                    end(false);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            end(true);
            Ok(())
        })
    }
}

/// The test timings with the breaker off and a quick backoff: each key
/// retries on its own.
fn quick_retries() -> Config {
    config("pause_min_keys = 0\nretry_backoff_initial_ms = 20\nretry_backoff_max_ms = 80")
}

/// Waits for every key of `keys` to have failed at least `times` attempts.
async fn every_key_failed(handler: &Dependent, keys: &[String], times: usize) -> anyhow::Result<()> {
    handler
        .until(Duration::from_secs(20), "every key to fail transiently", |h| {
            let attempts = h.attempts();
            keys.iter()
                .all(|key| attempts.iter().filter(|a| &a.key == key).count() >= times)
        })
        .await
}

/// Waits for every key of `keys` to have handled `seqs`, in order.
async fn all_handled(handler: &Dependent, keys: &[String], seqs: &[u64]) -> anyhow::Result<()> {
    handler
        .until(Duration::from_secs(30), "every message handled", |h| {
            let handled = h.handled();
            keys.iter()
                .all(|key| handled.get(key).is_some_and(|got| got == seqs))
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_under_the_per_key_worker_retries_in_order_and_counts_nothing() -> anyhow::Result<()> {
    common::logs();
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("transient");
    let keys = keys(4);
    let handler = Dependent::succeeding();
    handler.outage(true);
    let broker = broker(&url, quick_retries()).await?;
    publish_all(&broker, &category, &keys, 0..3).await?;
    let run = Running::start(&broker, vec![subscribe::partitioned(GROUP, &category, &handler)]);

    // Many more attempts than `max_retries = 0` allows a poison message.
    every_key_failed(&handler, &keys, 5).await?;
    let admin = broker.admin();
    assert!(admin.halted().await?.is_empty(), "an outage halted a partition");
    let client = pool(&url).await?;
    for key in &keys {
        let counted: u64 = client
            .hlen(PartitionKeys::new(&category, key, "backfill").attempts(GROUP))
            .await?;
        assert_eq!(counted, 0, "transient failures of {key} were counted in Redis");
    }
    let attempts = handler.attempts();
    assert!(
        attempts.iter().all(|a| a.attempt == 1 && a.seq == 0),
        "a transient failure used up an attempt, or a later message overtook"
    );

    handler.outage(false);
    all_handled(&handler, &keys, &[0, 1, 2]).await?;
    assert!(admin.halted().await?.is_empty());
    assert_eq!(handler.overlaps(), 0);
    for key in &keys {
        let tokens: std::collections::BTreeSet<u64> = handler
            .attempts()
            .iter()
            .filter(|a| &a.key == key)
            .map(|a| a.token)
            .collect();
        assert_eq!(tokens.len(), 1, "{key} changed owner: its lease was not kept");
    }
    run.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_under_hashed_partitions_parks_no_key() -> anyhow::Result<()> {
    common::logs();
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("transient_hashed");
    let keys = keys(6);
    let handler = Dependent::succeeding();
    handler.outage(true);
    let config = quick_retries().with_partitions(&category, Partitions::Hashed(NonZeroU32::new(2).unwrap()));
    let broker = broker(&url, config).await?;
    publish_all(&broker, &category, &keys, 0..3).await?;
    let run = Running::start(&broker, vec![subscribe::partitioned(GROUP, &category, &handler)]);
    // Many more attempts than `max_retries = 0` allows a poison message.
    every_key_failed(&handler, &keys, 5).await?;
    let admin = broker.admin();
    assert!(admin.halted().await?.is_empty(), "an outage parked a key");
    let client = pool(&url).await?;
    for index in 0..2 {
        let partition = PartitionKeys::of(PartitionId::hashed(&category, index), "backfill");
        let counted: u64 = client.hlen(partition.attempts(GROUP)).await?;
        assert_eq!(counted, 0, "transient failures were counted in Redis");
    }
    handler.outage(false);
    all_handled(&handler, &keys, &[0, 1, 2]).await?;
    assert!(admin.halted().await?.is_empty());
    assert_eq!(handler.overlaps(), 0);
    run.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_under_a_plain_consumer_dead_letters_nothing() -> anyhow::Result<()> {
    common::logs();
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("transient_plain");
    let handler = Dependent::succeeding();
    handler.outage(true);
    let broker = broker(&url, quick_retries()).await?;
    let publications: Vec<_> = (0..3)
        .map(|seq| {
            ordo_core::contract::broker::Publication::to_base(common::envelope(
                &category,
                "Happened",
                Some("k0"),
                seq,
            ))
        })
        .collect();
    broker.publish(&publications).await?;
    let run = Running::start(&broker, vec![subscribe::plain(GROUP, &category, &handler)]);
    handler
        .until(Duration::from_secs(20), "five failed attempts", |h| {
            h.attempts().len() >= 5
        })
        .await?;
    let client = pool(&url).await?;
    let dlq = ordo_redis::plain_dlq(&category);
    assert_eq!(
        client.xlen::<u64, _>(&dlq).await?,
        0,
        "an outage dead-lettered a message"
    );
    handler.outage(false);
    handler
        .until(Duration::from_secs(20), "every message handled", |h| {
            let mut seqs = h.handled().remove("k0").unwrap_or_default();
            seqs.sort_unstable();
            seqs == [0, 1, 2]
        })
        .await?;
    assert_eq!(client.xlen::<u64, _>(&dlq).await?, 0);
    run.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn most_keys_failing_transiently_pause_the_handler_visibly_until_it_resumes() -> anyhow::Result<()> {
    common::logs();
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("paused");
    let keys = keys(6);
    let handler = Dependent::succeeding();
    handler.outage(true);
    let config = config("pause_min_keys = 3\nretry_backoff_initial_ms = 100\nretry_backoff_max_ms = 100");
    let broker = broker(&url, config.clone()).await?;
    publish_all(&broker, &category, &keys, 0..2).await?;
    let subscriptions = vec![subscribe::partitioned(GROUP, &category, &handler)];
    let run = Running::start(&broker, subscriptions.clone());

    // Recorded in Redis for `ordo status`, and in health.
    let status = ClusterStatus::new(pool(&url).await?, "backfill");
    let paused = Arc::new(Mutex::new(Vec::new()));
    ordo_testkit::eventually(Duration::from_secs(20), "the pause recorded in Redis", || {
        let (status, paused) = (&status, paused.clone());
        async move {
            let found = status.paused(GROUP).await?;
            let any = !found.is_empty();
            *paused.lock().unwrap() = found;
            Ok(any)
        }
    })
    .await?;
    let paused = paused.lock().unwrap().clone();
    assert!(
        paused[0].reason.contains("keys failed transiently"),
        "{:?}",
        paused[0]
    );
    assert!(
        paused[0].reason.contains("ledger service is down"),
        "{:?}",
        paused[0]
    );
    let health = broker.health(&subscriptions, config.health()).await;
    assert_eq!(health[0].state, HealthState::Paused, "{health:?}");

    // Paused: one probe at a time, at a growing interval.
    let before = handler.attempts().len();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let during = handler.attempts().len() - before;
    assert!(during <= 6, "{during} attempts in 1.2 s while paused");
    assert!(broker.admin().halted().await?.is_empty());

    handler.outage(false);
    all_handled(&handler, &keys, &[0, 1]).await?;
    ordo_testkit::eventually(Duration::from_secs(10), "the pause record cleared", || {
        let status = &status;
        async move { Ok(status.paused(GROUP).await?.is_empty()) }
    })
    .await?;
    let health = broker.health(&subscriptions, config.health()).await;
    assert_eq!(health[0].state, HealthState::Ok, "{health:?}");
    assert_eq!(handler.overlaps(), 0);
    run.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_that_hangs_is_cancelled_at_its_timeout_and_the_key_goes_on() -> anyhow::Result<()> {
    common::logs();
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("timeout");
    let keys = keys(2);
    // k0's first message hangs on its first attempt; everything else succeeds.
    let handler = Dependent::new(|key, seq, nth| {
        if key == "k0" && seq == 0 && nth == 0 {
            Act::Hang
        } else {
            Act::Succeed
        }
    });
    let broker = broker(&url, config("max_retries = 1\nhandler_timeout_ms = 300")).await?;
    publish_all(&broker, &category, &keys, 0..3).await?;
    let run = Running::start(&broker, vec![subscribe::partitioned(GROUP, &category, &handler)]);
    all_handled(&handler, &keys, &[0, 1, 2]).await?;
    let attempts = handler.attempts();
    let k0: Vec<&Attempt> = attempts.iter().filter(|a| a.key == "k0" && a.seq == 0).collect();
    assert_eq!(k0.len(), 2, "the hanging attempt was cancelled and retried");
    assert_eq!(
        (k0[0].attempt, k0[1].attempt),
        (1, 2),
        "a timeout counts as a failed attempt"
    );
    assert!(k0[1].started >= k0[0].started + Duration::from_millis(300));
    assert_eq!(k0[0].token, k0[1].token, "the key kept its lease");
    assert!(broker.admin().halted().await?.is_empty());
    assert_eq!(handler.overlaps(), 0);
    run.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_past_its_timeout_in_blocking_code_holds_its_key_until_it_ends() -> anyhow::Result<()> {
    common::logs();
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("timeout_blocking");
    let keys = keys(1);
    let handler = Dependent::new(|_, seq, nth| {
        if seq == 0 && nth == 0 {
            Act::BlockThenAwait(Duration::from_millis(1_500))
        } else {
            Act::Succeed
        }
    });
    let broker = broker(&url, config("max_retries = 1\nhandler_timeout_ms = 200")).await?;
    publish_all(&broker, &category, &keys, 0..2).await?;
    let run = Running::start(&broker, vec![subscribe::partitioned(GROUP, &category, &handler)]);
    all_handled(&handler, &keys, &[0, 1]).await?;
    let attempts = handler.attempts();
    assert_eq!(attempts.len(), 3, "{attempts:?}");
    let (first, retry) = (&attempts[0], &attempts[1]);
    assert!(!first.succeeded && retry.succeeded && retry.seq == 0);
    assert!(
        retry.started >= first.ended.unwrap(),
        "the retry started while the timed-out run still blocked"
    );
    assert_eq!(first.token, retry.token, "the key kept its lease meanwhile");
    assert_eq!(handler.overlaps(), 0);
    run.stop().await
}

/// Commits each message's seq to a list through the Redis fence, with a
/// client of its own whose commands time out after 500 ms; the first
/// attempt of the first message waits for `go` before it commits.
#[derive(Clone)]
struct FenceWriter {
    client: fred::clients::Client,
    effects: String,
    go: tokio::sync::watch::Receiver<bool>,
    errors: Arc<Mutex<Vec<String>>>,
    runs: Arc<Mutex<Vec<(u64, u32)>>>,
}

impl DynHandler for FenceWriter {
    fn handle<'a>(&'a self, message: &'a Envelope, ctx: &'a HandlerContext) -> BoxFuture<'a, HandlerResult> {
        Box::pin(async move {
            let seq = seq_of(message);
            let first = {
                let mut runs = self.runs.lock().unwrap();
                runs.push((seq, ctx.attempt()));
                runs.len() == 1
            };
            if first {
                self.go.clone().wait_for(|go| *go).await?;
            }
            let fence = ordo_redis::RedisFence::from_context(ctx).ok_or("no fence on the context")?;
            let writes = ordo_redis::FencedWrite::new().rpush(&self.effects, seq.to_string());
            if let Err(error) = fence.commit(&self.client, &writes).await {
                self.errors
                    .lock()
                    .unwrap()
                    .push(ordo_core::contract::error::error_chain(&error));
                return Err(error.into());
            }
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_under_the_redis_fence_is_retried_not_halted() -> anyhow::Result<()> {
    use fred::interfaces::{ClientLike, ListInterface};
    use fred::types::config::ReconnectPolicy;

    common::logs();
    let mut redis = Redis::builder().append_only(true).start()?;
    let url = redis.url();
    let category = common::category("fence_outage");
    let mut builder = fred::prelude::Builder::from_config(ordo_redis::client_config(&url)?);
    builder
        .with_performance_config(|perf| perf.default_command_timeout = Duration::from_millis(500))
        .set_policy(ReconnectPolicy::new_constant(0, 100));
    let client = builder.build()?;
    client.init().await?;
    let (go, wait) = tokio::sync::watch::channel(false);
    let handler = FenceWriter {
        client: client.clone(),
        effects: format!("{{{category}:k0}}:effects"),
        go: wait,
        errors: Arc::default(),
        runs: Arc::default(),
    };
    let broker = broker(
        &url,
        config("pause_min_keys = 0\nretry_backoff_initial_ms = 50\nretry_backoff_max_ms = 200"),
    )
    .await?;
    publish_all(&broker, &category, &["k0".to_owned()], 0..2).await?;
    let run = Running::start(&broker, vec![subscribe::partitioned(GROUP, &category, &handler)]);
    ordo_testkit::eventually(Duration::from_secs(10), "the first run to start", || {
        let started = !handler.runs.lock().unwrap().is_empty();
        async move { Ok(started) }
    })
    .await?;

    // Redis goes away while the handler is about to commit its effect.
    redis.stop()?;
    go.send(true)?;
    ordo_testkit::eventually(Duration::from_secs(10), "the fenced commit to fail", || {
        let failed = !handler.errors.lock().unwrap().is_empty();
        async move { Ok(failed) }
    })
    .await?;
    redis.restart()?;

    let effects = pool(&url).await?;
    ordo_testkit::eventually(Duration::from_secs(30), "both effects, in order", || {
        let (effects, list) = (&effects, handler.effects.clone());
        async move {
            let got: Vec<String> = effects.lrange(&list, 0, -1).await?;
            Ok(got == ["0", "1"])
        }
    })
    .await?;
    assert!(
        broker.admin().halted().await?.is_empty(),
        "a Redis restart halted the key: {:?}",
        handler.errors.lock().unwrap()
    );
    let runs = handler.runs.lock().unwrap().clone();
    assert!(
        runs.iter().all(|(_, attempt)| *attempt == 1),
        "the outage used up an attempt: {runs:?}"
    );
    run.stop().await
}

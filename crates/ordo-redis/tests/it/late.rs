//! A command that reaches Redis late never lands out of order.
//!
//! One pool connection can be slow while the others flow: a fenced commit
//! held back on its connection past the client's timeout fails on the
//! client, the worker retries the handler, which commits again (on another
//! connection), and goes on to later messages, all under one valid lease.
//! When the held commit finally reaches Redis it used to find the same lease
//! value and be applied after the later messages' effects. Now every attempt
//! the worker has moved past is closed, and its late commands are refused.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use fred::clients::{Client, Pool};
use fred::interfaces::{ClientLike, KeysInterface, ListInterface};
use fred::prelude::{Builder, Config as FredConfig};
use ordo_core::contract::broker::Broker;
use ordo_core::contract::handler::DynHandler;
use ordo_core::contract::handler::{BoxFuture, HandlerContext, HandlerKind, HandlerResult};
use ordo_core::contract::key::Lane;
use ordo_core::contract::message::Envelope;
use ordo_redis::internals::{HaltReason, Partitions};
use ordo_redis::{Error, FencedWrite, PartitionKeys, RedisFence};
use ordo_testkit::Redis;

use common::proxy::Proxy;
use common::{Running, pool, publication, seq_of, subscription};
use ordo_testkit::eventually;

/// Commits `s{seq}r{run}` to a list under the fence (`run` counts the runs
/// of the message from 1): the first run of seq 0 through `slow` (a client
/// whose connection the proxy holds back), everything else directly. (The
/// timed-out commit is a transient failure: the retry is attempt 1 again.)
struct Committer {
    slow: Client,
    direct: Pool,
    list: String,
    runs: std::sync::Mutex<std::collections::HashMap<u64, u32>>,
}

impl DynHandler for Committer {
    fn handle<'a>(&'a self, message: &'a Envelope, ctx: &'a HandlerContext) -> BoxFuture<'a, HandlerResult> {
        Box::pin(async move {
            let fence = RedisFence::from_context(ctx).expect("handled by the Redis broker");
            let seq = seq_of(message);
            let run = {
                let mut runs = self.runs.lock().unwrap();
                let run = runs.entry(seq).or_default();
                *run += 1;
                *run
            };
            let writes = FencedWrite::new().rpush(&self.list, format!("s{seq}r{run}"));
            if seq == 0 && run == 1 {
                fence.commit(&self.slow, &writes).await?;
            } else {
                fence.commit(&self.direct, &writes).await?;
            }
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_delayed_past_its_timeout_never_lands_after_later_messages() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let proxy = Proxy::start(redis.port()).await?;
    let direct = pool(&redis.url()).await?;
    let category = common::category("late");
    let list = format!("{category}:effects");

    let mut config = FredConfig::from_url(&proxy.url())?;
    config.fail_fast = true;
    let slow: Client = Builder::from_config(config)
        .with_performance_config(|perf| perf.default_command_timeout = Duration::from_millis(300))
        .build()?;
    slow.init().await?;
    proxy.delay_next_containing("s0r1", Duration::from_millis(1_500));

    let broker = common::broker(&redis.url(), common::config(5_000, 3_600_000, 3)).await?;
    let handler = Arc::new(Committer {
        slow: slow.clone(),
        direct: direct.clone(),
        list: list.clone(),
        runs: Default::default(),
    });
    let running = Running::start(
        &broker,
        vec![subscription(
            "Committer",
            HandlerKind::Event,
            &[&category],
            true,
            handler,
        )],
    );
    let publications: Vec<_> = (0..3)
        .map(|seq| publication(&category, "k", seq, Lane::Primary))
        .collect();
    broker.publish(&publications).await?;

    eventually(Duration::from_secs(10), "every message to be handled", || async {
        Ok(direct.llen::<u64, _>(&list).await? >= 3)
    })
    .await?;
    eventually(
        Duration::from_secs(10),
        "the held commit to reach Redis",
        || async { Ok(proxy.delayed_delivered()) },
    )
    .await?;
    // The held commit is ahead of this on its connection: once this answers,
    // Redis has run it.
    let _: String = slow.ping(None).await?;

    let effects: Vec<String> = direct.lrange(&list, 0, -1).await?;
    assert_eq!(
        effects,
        ["s0r2", "s1r1", "s2r1"],
        "the late commit of the first attempt landed after later messages"
    );
    running.stop().await?;
    slow.quit().await?;
    Ok(())
}

/// The same halt arriving twice (a lost reply resent, or a delayed copy)
/// cannot halt again a partition the operator resolved in between.
#[tokio::test]
async fn a_late_halt_cannot_halt_a_resolved_partition_again() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let direct = pool(&redis.url()).await?;
    let category = common::category("late");
    let partition = PartitionKeys::new(&category, "k", "backfill");
    let broker = common::broker(&redis.url(), common::config(15_000, 3_600_000, 0)).await?;
    broker
        .publish(&[publication(&category, "k", 0, Lane::Primary)])
        .await?;
    let owner = Partitions::new(direct.clone(), "a", Duration::from_secs(30));
    let lease = owner.acquire("G", &partition).await?.expect("free");
    let head = match owner.read(&lease, "G", &partition, 10).await? {
        ordo_redis::internals::ReadOutcome::Entries { entries, .. } => entries[0].id().to_owned(),
        other => anyhow::bail!("expected entries, got {other:?}"),
    };
    let reason = HaltReason {
        lane: Lane::Primary,
        head: head.clone(),
        error: "poison".to_owned(),
        attempts: 1,
    };
    owner.halt_attempt(&lease, "G", &partition, &reason, 1).await?;
    broker.admin().retry("G", &category, "k").await?;
    let again = owner.halt_attempt(&lease, "G", &partition, &reason, 1).await;
    assert!(matches!(again, Err(Error::Stale { .. })), "{again:?}");
    assert!(
        !direct.exists::<bool, _>(partition.halt("G")).await?,
        "the late halt halted the resolved partition again"
    );
    Ok(())
}

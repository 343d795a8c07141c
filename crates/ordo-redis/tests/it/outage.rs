//! An instance cut off from Redis longer than the lease TTL stops its
//! handlers before its leases can expire, so the instance that takes over
//! never runs a key's message while the cut-off one still does.
//!
//! The instance reaches Redis through a proxy that partitions it (its
//! connections stay open and nothing gets through, so its commands time
//! out), while the test, playing the next owner, reaches Redis directly and
//! takes the lease the moment it expires. The TTL (2.5 s) is not a multiple
//! of the heartbeat (0.8 s): the old give-up rule (`since + interval >=
//! ttl`) then decided only at 2.8 s, after the lease had expired, and the
//! decision went through a supervisor busy with a discovery round stuck on
//! the same outage.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ordo_core::contract::broker::Broker;
use ordo_core::contract::handler::DynHandler;
use ordo_core::contract::handler::{BoxFuture, HandlerContext, HandlerResult};
use ordo_core::contract::key::Lane;
use ordo_core::contract::message::Envelope;
use ordo_redis::PartitionKeys;
use ordo_redis::internals::Partitions;
use ordo_testkit::Redis;

use common::proxy::Proxy;
use common::{Running, pool, publication, subscribe};
use ordo_testkit::eventually;

const GROUP: &str = "Projector";

fn config() -> ordo_core::contract::config::Config {
    ordo_core::contract::config::Config::from_toml_str(
        "[server.partitioning]\n\
         lease_ttl_ms = 2500\n\
         heartbeat_interval_seconds = 0.8\n\
         poll_interval_seconds = 0.1\n\
         discovery_interval_seconds = 0.1\n\
         max_retries = 0\n",
    )
    .expect("test config is valid")
}

/// What the handler saw.
#[derive(Debug, Default)]
struct Seen {
    /// Fencing tokens of the runs, in order.
    runs: Vec<u64>,
    /// When the first run was stopped from outside (its future dropped).
    first_stopped: Option<Instant>,
    /// Tokens of the runs that completed.
    completed: Vec<u64>,
}

/// The first run takes a minute; later runs complete at once.
#[derive(Clone, Default)]
struct Handler(Arc<Mutex<Seen>>);

/// Records when the run holding it is dropped before completing.
struct StopWatch(Option<Arc<Mutex<Seen>>>);

impl StopWatch {
    fn completed(mut self) {
        self.0 = None;
    }
}

impl Drop for StopWatch {
    fn drop(&mut self) {
        if let Some(seen) = self.0.take() {
            seen.lock().unwrap().first_stopped = Some(Instant::now());
        }
    }
}

impl DynHandler for Handler {
    fn handle<'a>(&'a self, _: &'a Envelope, ctx: &'a HandlerContext) -> BoxFuture<'a, HandlerResult> {
        Box::pin(async move {
            let first = {
                let mut seen = self.0.lock().unwrap();
                seen.runs.push(ctx.fencing_token());
                seen.runs.len() == 1
            };
            if first {
                let watch = StopWatch(Some(self.0.clone()));
                tokio::time::sleep(Duration::from_secs(60)).await;
                watch.completed();
            }
            self.0.lock().unwrap().completed.push(ctx.fencing_token());
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_instance_stops_its_handlers_before_its_leases_expire() -> anyhow::Result<()> {
    common::logs();
    let redis = Redis::start_local()?;
    let proxy = Proxy::start(redis.port()).await?;
    let direct = pool(&redis.url()).await?;
    let category = common::category("outage");
    let partition = PartitionKeys::new(&category, "k", "backfill");
    let handler = Handler::default();
    let seen = handler.0.clone();

    let cut_off = common::broker(&proxy.url(), config()).await?;
    cut_off
        .publish(&[publication(&category, "k", 0, Lane::Primary)])
        .await?;
    let run = Running::start(&cut_off, vec![subscribe::partitioned(GROUP, &category, &handler)]);
    eventually(Duration::from_secs(10), "the first run to start", || async {
        Ok(!seen.lock().unwrap().runs.is_empty())
    })
    .await?;
    let stale_token = seen.lock().unwrap().runs[0];

    // The instance is cut off; the next owner takes the lease as soon as
    // it expires.
    proxy.partition();
    let next = Partitions::new(direct.clone(), "next", Duration::from_secs(30));
    let deadline = Instant::now() + Duration::from_secs(10);
    let (taken, tried_at) = loop {
        let tried_at = Instant::now();
        if let Some(lease) = next.acquire(GROUP, &partition).await? {
            break (lease, tried_at);
        }
        anyhow::ensure!(Instant::now() < deadline, "the lease never expired");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(taken.token() > stale_token);
    let stopped = seen.lock().unwrap().first_stopped;
    let stopped = stopped.expect("the cut-off instance's handler still ran when its lease expired");
    assert!(
        stopped < tried_at,
        "the cut-off handler stopped {:?} after the next owner could take over",
        stopped - tried_at
    );

    // The network heals and the next owner lets go: the instance takes the
    // partition back and runs the message again, under a newer lease.
    proxy.heal();
    assert!(next.release(&taken).await?);
    eventually(
        Duration::from_secs(15),
        "the message to be handled again",
        || async { Ok(seen.lock().unwrap().completed.iter().any(|t| *t > taken.token())) },
    )
    .await?;
    run.stop().await?;
    Ok(())
}

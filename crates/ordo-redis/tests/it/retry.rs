//! A stale owner never runs a handler again: a handler error caused by the
//! fence stops the worker, and every retry first confirms the lease.
//!
//! The bug these tests catch: a worker whose lease was taken over while its
//! handler ran retried the handler after backoff, under the lost lease, until
//! the heartbeat noticed at its next beat (seconds later with the defaults),
//! so the stale owner and the new owner ran the same message concurrently.
//!
//! How the lease is taken over: in one process a lease cannot lapse under a
//! live heartbeat (the heartbeat gives its leases up before they can expire,
//! by design); a stall past the TTL needs a stopped process, which
//! ordo-harness does with SIGSTOP. What is tested here is the worker's retry
//! path once the lease is gone, so the takeover is made directly: the lease
//! key is deleted and another instance acquires it with `Partitions::acquire`.
//! The heartbeat beats every 10 s, so it cannot notice the takeover within
//! the few milliseconds in which the old code retried.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::clients::Pool;
use fred::interfaces::{KeysInterface, ListInterface};
use ordo_core::contract::broker::Broker;
use ordo_core::contract::handler::DynHandler;
use ordo_core::contract::handler::{BoxFuture, HandlerContext, HandlerResult};
use ordo_core::contract::key::Lane;
use ordo_core::contract::message::Envelope;
use ordo_core::contract::process::ProcessStore;
use ordo_redis::internals::Partitions;
use ordo_redis::{FencedWrite, PartitionKeys, RedisFence, RedisProcessStore};
use ordo_testkit::Redis;
use tokio::sync::watch;

use common::{Running, pool, publication, subscribe};
use ordo_testkit::eventually;

const GROUP: &str = "Projector";
const TTL: Duration = Duration::from_secs(30);

/// A long lease and a heartbeat that beats rarely (see the module docs);
/// quick discovery and retries.
fn config() -> ordo_core::contract::config::Config {
    ordo_core::contract::config::Config::from_toml_str(
        "[server.partitioning]\n\
         lease_ttl_ms = 30000\n\
         heartbeat_interval_seconds = 10\n\
         poll_interval_seconds = 0.1\n\
         discovery_interval_seconds = 0.1\n\
         max_retries = 3\n\
         retry_backoff_initial_ms = 10\n\
         retry_backoff_max_ms = 40\n",
    )
    .expect("test config is valid")
}

/// How the first run of the handler fails once its lease is gone.
#[derive(Debug, Clone, Copy)]
enum Failure {
    /// Its fenced commit is refused (`ordo_redis::Error::Fenced`).
    FencedCommit,
    /// Its fenced process-state save is refused (`ProcessStoreError::Fenced`).
    FencedSave,
    /// An error that has nothing to do with the fence.
    Unrelated,
}

/// One run of the handler.
#[derive(Debug, Clone)]
struct Run {
    token: u64,
    attempt: u32,
    /// Set when the run returned: whether it succeeded.
    succeeded: Option<bool>,
}

/// The first run waits for `go`, then fails as `failure` says; every later
/// run under the same lease fails at once (the old code's stale retries),
/// and runs under any other lease commit an effect and succeed.
#[derive(Clone)]
struct Handler {
    client: Pool,
    effects: String,
    failure: Failure,
    go: watch::Receiver<bool>,
    runs: Arc<Mutex<Vec<Run>>>,
}

impl Handler {
    fn runs(&self) -> Vec<Run> {
        self.runs.lock().unwrap().clone()
    }

    fn finish(&self, index: usize, succeeded: bool) {
        self.runs.lock().unwrap()[index].succeeded = Some(succeeded);
    }

    async fn first_run(&self, ctx: &HandlerContext) -> HandlerResult {
        let mut go = self.go.clone();
        go.wait_for(|go| *go).await?;
        let fence = RedisFence::from_context(ctx).ok_or("no fence on the context")?;
        match self.failure {
            Failure::FencedCommit => {
                let writes = FencedWrite::new().rpush(&self.effects, ctx.fencing_token().to_string());
                fence.commit(&self.client, &writes).await?;
            }
            Failure::FencedSave => {
                RedisProcessStore::new(self.client.clone())
                    .save("Fulfilment", "k", "{}".to_owned(), ctx)
                    .await?;
            }
            Failure::Unrelated => return Err("the downstream service is unavailable".into()),
        }
        Err("the fenced write was expected to be refused".into())
    }
}

impl DynHandler for Handler {
    fn handle<'a>(&'a self, _: &'a Envelope, ctx: &'a HandlerContext) -> BoxFuture<'a, HandlerResult> {
        Box::pin(async move {
            let token = ctx.fencing_token();
            let (index, first_token) = {
                let mut runs = self.runs.lock().unwrap();
                runs.push(Run {
                    token,
                    attempt: ctx.attempt(),
                    succeeded: None,
                });
                (runs.len() - 1, runs[0].token)
            };
            let result = if index == 0 {
                self.first_run(ctx).await
            } else if token == first_token {
                Err("a stale owner ran the handler again".into())
            } else {
                let fence = RedisFence::from_context(ctx).ok_or("no fence on the context")?;
                let writes = FencedWrite::new().rpush(&self.effects, token.to_string());
                fence
                    .commit(&self.client, &writes)
                    .await
                    .map(drop)
                    .map_err(Into::into)
            };
            self.finish(index, result.is_ok());
            result
        })
    }
}

/// Runs one message whose first run loses its lease mid-handler and then
/// fails as `failure` says; checks that the stale owner ran it only once,
/// did not halt the partition, and that the next owner handled it.
async fn a_stale_owner_does_not_run_the_handler_again(failure: Failure) -> anyhow::Result<()> {
    common::logs();
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("retry");
    let partition = PartitionKeys::new(&category, "k", "backfill");
    let client = pool(&url).await?;
    let (go, go_rx) = watch::channel(false);
    let handler = Handler {
        client: client.clone(),
        effects: format!("{category}:effects"),
        failure,
        go: go_rx,
        runs: Arc::default(),
    };
    let broker = common::broker(&url, config()).await?;
    broker
        .publish(&[publication(&category, "k", 0, Lane::Primary)])
        .await?;
    let run = Running::start(&broker, vec![subscribe::partitioned(GROUP, &category, &handler)]);

    eventually(Duration::from_secs(10), "the first run to start", || async {
        Ok(!handler.runs().is_empty())
    })
    .await?;
    let stale_token = handler.runs()[0].token;

    // Another instance takes the partition over while the first run is in
    // the handler; then the first run goes on and fails.
    let lease_key = partition.lease(GROUP).lease;
    let _: i64 = client.del(&lease_key).await?;
    let intruder = Partitions::new(client.clone(), "intruder", TTL);
    let taken = intruder
        .acquire(GROUP, &partition)
        .await?
        .expect("the deleted lease is free");
    assert!(taken.token() > stale_token);
    go.send(true)?;
    eventually(Duration::from_secs(10), "the first run to fail", || async {
        Ok(handler.runs()[0].succeeded == Some(false))
    })
    .await?;

    // The intruder lets go; the broker's next worker takes over (only once
    // the stale worker has exited) and handles the message.
    assert!(intruder.release(&taken).await?);
    eventually(
        Duration::from_secs(10),
        "the message to be handled by the next owner",
        || async {
            Ok(handler
                .runs()
                .iter()
                .any(|r| r.succeeded == Some(true) && r.token > taken.token()))
        },
    )
    .await?;

    let runs = handler.runs();
    let stale: Vec<&Run> = runs.iter().filter(|r| r.token == stale_token).collect();
    assert_eq!(
        stale.len(),
        1,
        "the stale owner ran the handler again under its lost lease: {runs:?}"
    );
    assert_eq!(stale[0].attempt, 1);
    assert!(
        broker.admin().halted().await?.is_empty(),
        "a stale owner must not halt the partition"
    );
    let effects: Vec<String> = client.lrange(format!("{category}:effects"), 0, -1).await?;
    assert!(
        !effects.contains(&stale_token.to_string()),
        "the stale owner's effect landed: {effects:?}"
    );
    run.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_fenced_commit_stops_the_worker_instead_of_retrying() -> anyhow::Result<()> {
    a_stale_owner_does_not_run_the_handler_again(Failure::FencedCommit).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_process_state_save_stops_the_worker_instead_of_retrying() -> anyhow::Result<()> {
    a_stale_owner_does_not_run_the_handler_again(Failure::FencedSave).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_the_lease_was_taken_over_is_not_retried() -> anyhow::Result<()> {
    a_stale_owner_does_not_run_the_handler_again(Failure::Unrelated).await
}

//! What the process-level tests share: a Redis of their own, `ordo-worker`
//! processes, a publisher, and reads of what the workers recorded.
//!
//! Worker logs go to the test's stderr at `error` level (without the Redis
//! client's own, which reports every connection a restart drops); set
//! `ORDO_HARNESS_LOG` (a `RUST_LOG` filter, e.g. `info,ordo_redis=debug`)
//! to see more.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::process::Command;
use std::time::{Duration, Instant};

use fred::clients::Pool;
use fred::interfaces::{KeysInterface, StreamsInterface};
use fred::prelude::{Builder, ClientLike, Config};
use fred::types::config::ReconnectPolicy;
use ordo_harness::keys::Records;
use ordo_harness::line::Line;
use ordo_harness::verify::Verdict;
use ordo_redis::{HaltedPartition, PartitionAdmin, Routing};
use ordo_testkit::{Process, Redis, wait_until};

/// The worker binary under test.
pub const WORKER: &str = env!("CARGO_BIN_EXE_ordo-worker");

/// How long a worker may take to print `ready`.
const READY_WITHIN: Duration = Duration::from_secs(15);

/// How long a publish may take.
const PUBLISH_WITHIN: Duration = Duration::from_secs(40);

/// A test's world: its Redis, a client on it, and a runtime for the client.
pub struct Env {
    pub redis: Redis,
    runtime: tokio::runtime::Runtime,
    client: Pool,
    /// The `chaos` category's hashed partitions (`None`: one per key),
    /// passed to every worker and publisher.
    hashed: Option<NonZeroU32>,
    records: Records,
}

impl Env {
    /// A fresh `redis-server` of the test's own.
    pub fn start() -> anyhow::Result<Self> {
        Self::with(Redis::start_local()?)
    }

    /// [`Env::start`] with the `chaos` category in `partitions` hashed
    /// partitions, for every worker, publisher and check.
    pub fn start_hashed(partitions: u32) -> anyhow::Result<Self> {
        let mut env = Self::start()?;
        let hashed = NonZeroU32::new(partitions).ok_or_else(|| anyhow::anyhow!("no partitions"))?;
        env.hashed = Some(hashed);
        env.records = Records::new(Routing::new(&ordo_harness::tick::config(env.hashed)));
        Ok(env)
    }

    /// The `--hashed-partitions` flag of workers and publishers, if any.
    fn hashed_args(&self) -> Vec<String> {
        self.hashed
            .map(|n| vec!["--hashed-partitions".to_owned(), n.to_string()])
            .unwrap_or_default()
    }

    /// `redis` and a client that reconnects when it restarts.
    pub fn with(redis: Redis) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let mut builder = Builder::from_config(Config::from_url(&redis.url())?);
        builder.set_policy(ReconnectPolicy::new_exponential(0, 50, 1_000, 2));
        builder.with_performance_config(|perf| perf.default_command_timeout = Duration::from_secs(5));
        let client = builder.build_pool(2)?;
        runtime.block_on(client.init())?;
        Ok(Self {
            redis,
            runtime,
            client,
            hashed: None,
            records: Records::default(),
        })
    }

    /// Runs `future` on the test's runtime.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// Spawns `future` on the test's runtime.
    pub fn spawn<F>(&self, future: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.runtime.spawn(future)
    }

    /// The client.
    pub fn client(&self) -> &Pool {
        &self.client
    }

    /// Starts `ordo-worker run` as `instance` with `extra` flags and waits
    /// for its `ready` line.
    pub fn worker(&self, instance: &str, extra: &[&str]) -> anyhow::Result<Process> {
        let mut command = Command::new(WORKER);
        command
            .args(["run", "--redis-url", &self.redis.url(), "--instance", instance])
            .args(self.hashed_args())
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("ORDO_HARNESS_LOG").unwrap_or_else(|_| "error,fred=off".to_owned()),
            );
        let mut process = Process::spawn(command)?;
        process.wait_for_line(|line| line.starts_with("ready "), READY_WITHIN)?;
        Ok(process)
    }

    /// Starts `ordo-worker publish` with `args` without waiting for it.
    pub fn spawn_publish(&self, args: &[&str]) -> anyhow::Result<Process> {
        let mut command = Command::new(WORKER);
        command
            .args(["publish", "--redis-url", &self.redis.url()])
            .args(self.hashed_args())
            .args(args);
        Ok(Process::spawn(command)?)
    }

    /// Runs `ordo-worker publish` with `args` to completion.
    pub fn publish(&self, args: &[&str]) -> anyhow::Result<()> {
        let mut publisher = self.spawn_publish(args)?;
        finish_publish(&mut publisher, args)
    }

    /// What the workers recorded, checked.
    pub fn verify(&self) -> anyhow::Result<Verdict> {
        Ok(self.block_on(ordo_harness::verify::verify_with(&self.client, &self.records))?)
    }

    /// Waits until every published event was applied.
    pub fn wait_all_applied(&self, within: Duration) -> anyhow::Result<Verdict> {
        let mut last = None;
        let waited = wait_until(within, "every published event to be applied", || {
            last = self.verify().ok();
            last.as_ref().is_some_and(|v| v.lost == 0)
        });
        if let Err(error) = waited {
            let lost: BTreeMap<String, Vec<u64>> = last
                .iter()
                .flat_map(|v| &v.per_key)
                .filter(|(_, r)| !r.lost.is_empty())
                .map(|(k, r)| (k.clone(), r.lost.clone()))
                .collect();
            anyhow::bail!("{error}; still missing: {lost:?}");
        }
        self.verify()
    }

    /// The holder of `key`'s lease: `(instance, token)`.
    pub fn lease_holder(&self, key: &str) -> anyhow::Result<Option<(String, u64)>> {
        let value: Option<String> = self.block_on(self.client.get(self.records.lease(key)))?;
        Ok(value.and_then(|v| {
            // `{instance}:{nonce}:{token}`
            let (owner, token) = v.rsplit_once(':')?;
            let (instance, _nonce) = owner.rsplit_once(':')?;
            Some((instance.to_owned(), token.parse().ok()?))
        }))
    }

    /// How many entries of `key`'s partition are delivered to the handler's
    /// group and not acknowledged yet (its primary lane).
    pub fn pending(&self, key: &str) -> anyhow::Result<u64> {
        let summary: fred::types::Value = self.block_on(self.client.xpending(
            self.records.partition(key).primary(),
            ordo_harness::tick::GROUP,
            (),
        ))?;
        Ok(summary
            .into_array()
            .first()
            .and_then(fred::types::Value::as_u64)
            .unwrap_or(0))
    }

    /// The runs of `key` workers in blocking mode started, in start order:
    /// `(instance, token, start ms by Redis's clock)`.
    pub fn blocking_starts(&self, key: &str) -> anyhow::Result<Vec<(String, u64, u64)>> {
        let entries: Vec<String> = self.block_on(fred::interfaces::ListInterface::lrange(
            &self.client,
            self.records.blocking_starts(key),
            0,
            -1,
        ))?;
        entries
            .iter()
            .map(|entry| {
                let mut fields = entry.split(' ');
                let (Some(instance), Some(token), Some(ms), None) =
                    (fields.next(), fields.next(), fields.next(), fields.next())
                else {
                    anyhow::bail!("a blocking start is `instance token ms`, not {entry:?}");
                };
                Ok((instance.to_owned(), token.parse()?, ms.parse()?))
            })
            .collect()
    }

    /// How long `key`'s lease has left, in ms: its holder's member key's
    /// (a lease has no TTL of its own); negative when not held.
    pub fn lease_pttl(&self, key: &str) -> anyhow::Result<i64> {
        let value: Option<String> = self.block_on(self.client.get(self.records.lease(key)))?;
        let Some(member) = value
            .as_deref()
            .and_then(ordo_redis::internals::names::lease_member)
        else {
            return Ok(-2);
        };
        Ok(self.block_on(self.client.pttl(member))?)
    }

    /// How many of `keys`' leases each instance holds (unheld ones under "").
    pub fn lease_counts(&self, keys: &[String]) -> anyhow::Result<BTreeMap<String, usize>> {
        let mut counts = BTreeMap::new();
        for key in keys {
            let holder = self.lease_holder(key)?.map(|(i, _)| i).unwrap_or_default();
            *counts.entry(holder).or_default() += 1;
        }
        Ok(counts)
    }

    /// The operator API.
    pub fn admin(&self) -> PartitionAdmin {
        PartitionAdmin::new(
            self.client.clone(),
            ordo_core::contract::key::DEFAULT_BACKFILL_SUFFIX,
        )
    }

    /// The halt record of `key`'s partition, if it is halted.
    pub fn halt_of(&self, key: &str) -> anyhow::Result<Option<HaltedPartition>> {
        let halted = self.block_on(self.admin().halted())?;
        Ok(halted.into_iter().find(|h| {
            h.group == ordo_harness::tick::GROUP && h.category == ordo_harness::tick::CATEGORY && h.key == key
        }))
    }
}

/// Waits for a publisher started with [`Env::spawn_publish`] to succeed.
pub fn finish_publish(publisher: &mut Process, args: &[&str]) -> anyhow::Result<()> {
    match publisher.wait_timeout(PUBLISH_WITHIN)? {
        Some(status) if status.success() => Ok(()),
        Some(status) => anyhow::bail!("publish {args:?} failed ({status}): {:?}", publisher.lines()),
        None => anyhow::bail!("publish {args:?} did not finish within {PUBLISH_WITHIN:?}"),
    }
}

/// The parsed output lines of `process` so far.
pub fn lines(process: &Process) -> Vec<Line> {
    process.lines().iter().filter_map(|l| Line::parse(l)).collect()
}

/// The first line of any of `workers` that satisfies `predicate`, with the
/// worker's position, waiting up to `within`.
pub fn wait_for_any(
    workers: &[&Process],
    within: Duration,
    what: &str,
    mut predicate: impl FnMut(&Line) -> bool,
) -> anyhow::Result<(usize, Line)> {
    let mut found = None;
    wait_until(within, what, || {
        found = workers
            .iter()
            .enumerate()
            .find_map(|(i, w)| lines(w).into_iter().find(|l| predicate(l)).map(|l| (i, l)));
        found.is_some()
    })?;
    Ok(found.expect("wait_until returned once found"))
}

/// Fails if `condition` turns false at any point during `window`: how a
/// test asserts that something does *not* happen for a while.
pub fn holds_for(window: Duration, what: &str, mut condition: impl FnMut() -> bool) -> anyhow::Result<()> {
    let started = Instant::now();
    while started.elapsed() < window {
        anyhow::ensure!(
            condition(),
            "{what} stopped holding after {:?}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    anyhow::ensure!(condition(), "{what} stopped holding at the end of {window:?}");
    Ok(())
}

impl Env {
    /// Asserts the parts of the guarantee that hold whatever the faults:
    /// nothing lost, reordered, overlapping, applied by a stale owner or
    /// invented.
    pub fn assert_sound(&self, verdict: &Verdict) {
        assert!(
            verdict.is_sound(),
            "the guarantee was broken:\n{verdict}\n{}overlap log: {:?}",
            offenders(verdict),
            self.overlap_log(),
        );
    }

    /// The overlap log of every published key: `{their marker} vs {my
    /// marker}` per overlap.
    pub fn overlap_log(&self) -> Vec<String> {
        self.block_on(ordo_harness::verify::overlap_log_with(
            &self.client,
            &self.records,
        ))
        .unwrap_or_default()
    }
}

/// The keys whose records show a problem, one line each.
fn offenders(verdict: &Verdict) -> String {
    let mut text = String::new();
    for (key, r) in &verdict.per_key {
        if r.lost.is_empty()
            && r.order_violations == 0
            && r.token_regressions == 0
            && r.duplicates.is_empty()
            && r.unexpected.is_empty()
        {
            continue;
        }
        let applied: Vec<String> = r
            .applied
            .iter()
            .map(|a| format!("{}@{}", a.seq, a.token % 1_000_000))
            .collect();
        text.push_str(&format!(
            "{key}: lost {:?} duplicates {:?} order_violations {} token_regressions {} unexpected {:?}\n  \
             applied (seq@token mod 1e6) {}\n",
            r.lost,
            r.duplicates,
            r.order_violations,
            r.token_regressions,
            r.unexpected,
            applied.join(" "),
        ));
    }
    text
}

/// `k0`..`k{count - 1}`.
pub fn key_names(count: usize) -> Vec<String> {
    ordo_harness::publisher::key_names(count)
}

//! `idle`: the commands one instance sends while it owns many idle
//! partitions.
//!
//! One event is published to each of `--partitions` keys; one engine
//! instance (Ordo's defaults, but `reap_idle_ms` of a day so nothing is
//! retired during the run) acquires every partition and handles its event.
//! Once all are handled and every partition's lease is this instance's, the
//! run waits `--settle-s` for the workers to park on the waker, then counts
//! for `--window-s`, with [`CommandMonitor`], the commands clients send:
//! one `FCALL` counts once, whatever its script runs (`INFO`'s counters
//! would count those too; they are printed apart as
//! `idle_script_cmds_per_s`). Nothing else talks to Redis meanwhile, so
//! every command counted is the instance's.
//!
//! Commands are not the whole idle cost: a renewal of thousands of leases and
//! a discovery read of thousands of index members cost Redis CPU time in
//! proportion to the partitions. `idle_redis_cpu_ms_per_s` is the CPU time
//! Redis used per second (its `INFO cpu`) over a window of the same length
//! just before the counted one, without `MONITOR` running.
//!
//! The memory figures are marginal: the instance first owns one idle
//! partition, then the others. `idle_redis_bytes_per_partition` is Redis's
//! `used_memory` once all are idle, less what it was with the first one
//! idle, over the others; `idle_engine_rss_bytes_per_partition` the same of
//! this process's resident memory. What the instance costs Redis whatever
//! it owns (its connections' buffers, the function library it loads, what
//! Redis allocates at the first stream, script and subscription) is printed
//! apart as `idle_redis_instance_bytes`, against `used_memory` before it
//! connected. On a server that held many more keys earlier, the main hash
//! table may still be sized for them, and the figures come out lower than
//! on a fresh one.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use fred::clients::Client;
use fred::interfaces::ClusterInterface as _;
use fred::prelude::{ClientLike as _, KeysInterface as _};
use fred::types::Value;
use ordo_core::contract::key::DEFAULT_BACKFILL_SUFFIX;
use ordo_redis::PartitionKeys;

use crate::engine::{self, BENCH_KEYS, Engine, EngineOptions, GROUP, Tally};
use crate::monitor::{CommandCounts, CommandMonitor};
use crate::redis::BenchRedis;
use crate::redis_info;
use crate::report::Report;
use crate::workload::{CATEGORY, key_name};

/// A day: no partition is retired during a run.
const REAP_IDLE_MS: u64 = 86_400_000;
/// Lease keys read per `MGET` when counting owned partitions.
const MGET_CHUNK: usize = 1_000;

/// Options of `ordo-bench idle`.
#[derive(Debug, Clone, clap::Args)]
pub struct IdleArgs {
    /// Idle partitions the instance owns.
    #[arg(long, default_value = "5000")]
    pub partitions: std::num::NonZeroUsize,
    /// How long Redis's CPU is measured, and then how long commands are counted.
    #[arg(long, default_value = "10")]
    pub window_s: f64,
    /// How long to wait, once every partition is owned and drained, before counting.
    #[arg(long, default_value = "3")]
    pub settle_s: f64,
    /// How long acquiring and draining the partitions may take.
    #[arg(long, default_value = "180")]
    pub deadline_s: u64,
}

/// Sets up the idle partitions and counts the instance's commands.
pub async fn run(args: &IdleArgs, redis: &BenchRedis) -> Result<Report> {
    for (name, seconds) in [("--window-s", args.window_s), ("--settle-s", args.settle_s)] {
        ensure!(
            seconds.is_finite() && seconds >= 0.0,
            "{name} must be a number of seconds, not {seconds}"
        );
    }
    let admin = redis.client().await?;
    engine::delete_matching(&admin, &BENCH_KEYS).await?;
    let result = measure(args, redis, &admin).await;
    engine::delete_matching(&admin, &BENCH_KEYS).await?;
    admin.quit().await?;
    result
}

async fn measure(args: &IdleArgs, redis: &BenchRedis, admin: &Client) -> Result<Report> {
    let partitions = args.partitions.get();
    let deadline = Duration::from_secs(args.deadline_s);
    let tally = Tally::new(args.partitions);
    let instance = format!("bench-idle-{}", std::process::id());
    let config = engine::config(Some(REAP_IDLE_MS))?;
    let memory_unconnected = redis_info::memory(admin).await?;
    let engine = Engine::connect(redis, &instance, &EngineOptions::new(config), tally.clone()).await?;
    engine::fill(&engine.domain, 0..1, partitions, 100, None).await?;
    let settle = Duration::from_secs_f64(args.settle_s);

    let counted = engine
        .run(async {
            // The zero of the memory figures: the instance connected and
            // owning one idle partition. What the instance costs whatever it
            // owns (its connections, the function library it loads, what
            // Redis allocates at the first stream, script and subscription)
            // is not the other partitions'.
            tally
                .wait_for(1, deadline)
                .await
                .context("the first partition's event was not handled")?;
            tokio::time::sleep(settle).await;
            let redis_first = redis_info::memory(admin).await?;
            let rss_first = redis_info::resident_bytes();

            // Published by the running instance's outbox processor.
            let started = Instant::now();
            engine::commit(&engine.domain, 1..partitions as u64, partitions, 100).await?;
            tally
                .wait_for(partitions as u64, deadline)
                .await
                .context("the partitions' events were not all handled")?;
            let owned = owned_partitions(admin, partitions, &instance).await?;
            ensure!(
                owned == partitions,
                "the instance owns {owned} of {partitions} partitions after handling their events"
            );
            let drained = started.elapsed();
            tokio::time::sleep(settle).await;
            let memory = Memory {
                partitions,
                redis_unconnected: memory_unconnected,
                redis_first,
                redis_idle: redis_info::memory(admin).await?,
                rss_first,
                rss_idle: redis_info::resident_bytes(),
            };
            // Redis's own CPU first, without MONITOR (which costs Redis a line
            // per command, script commands included).
            let window = Duration::from_secs_f64(args.window_s);
            let cpu_before = redis_info::cpu(admin).await?;
            tokio::time::sleep(window).await;
            let cpu = CpuUse {
                used: redis_info::cpu(admin).await?.saturating_sub(cpu_before),
                over: window,
            };
            // One MONITOR per node (every primary of a cluster), over one window.
            let config = ordo_redis::client_config(redis.url())?;
            let mut monitors = Vec::new();
            for (host, port) in nodes(admin) {
                let config = config.clone();
                monitors.push(
                    tokio::task::spawn_blocking(move || CommandMonitor::start_on(&config, &host, port))
                        .await
                        .context("the task starting MONITOR panicked")??,
                );
            }
            for monitor in &monitors {
                monitor.take();
            }
            tokio::time::sleep(window).await;
            let mut counts = CommandCounts::default();
            for monitor in &monitors {
                counts.merge(monitor.take());
            }
            drop(monitors);
            anyhow::Ok((owned, drained, cpu, counts, memory))
        })
        .await?;
    let (owned, drained, cpu, counts, memory) = counted?;
    let mut report = report(owned, drained, cpu, &counts);
    memory.report(&mut report);
    Ok(report)
}

/// What the idle partitions hold in memory: Redis's (each partition's
/// stream with its one handled entry, lease, index entry and group) and
/// this process's (the engine's workers and their state, and the bench).
#[derive(Debug, Clone, Copy)]
struct Memory {
    partitions: usize,
    /// Redis's `used_memory` before the instance connected, once it owned
    /// its first partition idle, and once it owned them all idle.
    redis_unconnected: u64,
    redis_first: u64,
    redis_idle: u64,
    /// This process's resident bytes at the first and the last of those.
    rss_first: Option<u64>,
    rss_idle: Option<u64>,
}

impl Memory {
    fn report(&self, report: &mut Report) {
        // Per partition past the first.
        let others = self.partitions.saturating_sub(1).max(1) as u64;
        let per_partition = |first: u64, idle: u64| idle.saturating_sub(first) / others;
        report
            .count("idle_redis_used_memory_bytes", self.redis_idle)
            .count(
                "idle_redis_instance_bytes",
                self.redis_first.saturating_sub(self.redis_unconnected),
            )
            .count(
                "idle_redis_bytes_per_partition",
                per_partition(self.redis_first, self.redis_idle),
            );
        if let (Some(first), Some(idle)) = (self.rss_first, self.rss_idle) {
            report
                .count("idle_engine_rss_bytes", idle)
                .count("idle_engine_rss_bytes_per_partition", per_partition(first, idle));
        }
    }
}

/// CPU time Redis used over a window.
#[derive(Debug, Clone, Copy)]
struct CpuUse {
    used: Duration,
    over: Duration,
}

/// The nodes commands go to: the one server, or every primary of a cluster
/// (as `host`, `port`).
fn nodes(client: &Client) -> Vec<(String, u16)> {
    match client.cached_cluster_state() {
        Some(state) if client.is_clustered() => state
            .unique_primary_nodes()
            .into_iter()
            .map(|server| (server.host.to_string(), server.port))
            .collect(),
        _ => match &client.client_config().server {
            fred::types::config::ServerConfig::Centralized { server } => {
                vec![(server.host.to_string(), server.port)]
            }
            _ => Vec::new(),
        },
    }
}

/// How many of the partitions' leases `instance` holds (one pipeline of
/// `GET`s per [`MGET_CHUNK`] lease keys: on a cluster the leases are in
/// many slots, which one `MGET` cannot name).
async fn owned_partitions(client: &Client, partitions: usize, instance: &str) -> Result<usize> {
    let prefix = format!("{instance}:");
    let leases: Vec<String> = (0..partitions)
        .map(|n| {
            PartitionKeys::new(CATEGORY, &key_name(n), DEFAULT_BACKFILL_SUFFIX)
                .lease(GROUP)
                .lease
        })
        .collect();
    let mut owned = 0;
    for chunk in leases.chunks(MGET_CHUNK) {
        let pipeline = client.pipeline();
        for lease in chunk {
            let _: () = pipeline.get(lease).await.context("queueing a lease GET failed")?;
        }
        let values: Vec<Value> = pipeline.all().await.context("reading the leases failed")?;
        owned += values
            .iter()
            .filter(|value| value.as_str().is_some_and(|v| v.starts_with(&prefix)))
            .count();
    }
    Ok(owned)
}

fn report(owned: usize, drained: Duration, cpu: CpuUse, counts: &CommandCounts) -> Report {
    let breakdown: Vec<String> = counts
        .by_command
        .iter()
        .map(|(command, n)| format!("{command}={n}"))
        .collect();
    let mut report = Report::new();
    report
        .per_second("idle_redis_cmds_per_s", counts.client_commands_per_s())
        .count("owned_partitions", owned as u64)
        .millis("idle_window_ms", counts.elapsed)
        .count("idle_client_commands", counts.client_commands)
        .per_second(
            "idle_script_cmds_per_s",
            crate::report::rate(counts.script_commands, counts.elapsed),
        )
        .text("idle_commands", breakdown.join(","))
        .millis(
            "idle_redis_cpu_ms_per_s",
            cpu.used.div_f64(cpu.over.as_secs_f64().max(f64::MIN_POSITIVE)),
        )
        .millis("idle_acquire_and_drain_ms", drained);
    report
}

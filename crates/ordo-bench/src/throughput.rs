//! `throughput`: Ordo's publish path and its ordered consumer against a
//! plain consumer group, on one Redis, in one run.
//!
//! For each instance count in `--instances` (default 1 and 2):
//! 1. a backlog of `--events` events over `--keys` keys is committed in
//!    units of work of `--per-commit` events and published by the outbox
//!    processor into the partition streams (with the index): that step is
//!    `publish_msgs_per_s` (over every fill of the run), costing
//!    `publish_engine_cpu_us_per_msg` of this process's CPU and
//!    `publish_redis_cpu_us_per_msg` of Redis's; what deduplication keeps
//!    per stream once the first backlog is published (each lane's producer
//!    hash and message-id set, `MEMORY USAGE`) is `dedup_bytes_per_stream`;
//! 2. that many engine instances (each its own `RedisBroker` and `Domain`:
//!    own connection pool, heartbeat thread, waker and supervisor, in this
//!    process and its tokio runtime) start together and drain the backlog
//!    with a trivial handler (decode, check per-key order, count);
//!    `ordered_msgs_per_s_{n}` is the events over the time from the first
//!    handler start to the last, so the first discovery round (which only
//!    announces the instance, one discovery interval) is reported apart as
//!    `ordered_startup_ms_{n}`; `ordered_max_share_{n}` is the largest share
//!    of the events one instance handled (0.5 when two split the keys
//!    evenly). Each instance's command pool has `--pool-size` connections
//!    (Ordo's default, 8, unless given): every message costs one fenced
//!    acknowledgement, and the acknowledgements of partitions in flight at
//!    the same moment travel together (group commit). What the backlog adds
//!    to Redis's `used_memory`, over the events, is
//!    `redis_bytes_per_pending_msg`. What the drain cost per message, from
//!    the engines' start to the last event handled:
//!    `ordered_script_calls_per_msg_{n}` and `ordered_script_us_per_msg_{n}`
//!    (`FCALL` in `INFO commandstats`: the fenced reads, the
//!    acknowledgements, the heartbeat's renewals), `ordered_redis_cpu_us_per_msg_{n}`
//!    (`INFO cpu`) and `ordered_engine_cpu_us_per_msg_{n}` (this process's
//!    CPU time: the engines' and the tally's).
//!
//! Then [`crate::baseline`] drains the same number of events with a plain
//! consumer group with the same batch size (`baseline_msgs_per_s`), and
//! `ratio_ordered_to_baseline` is the first instance count's rate over it.
//!
//! `--ack-window N` sets the handler's `ack_window` (a key's worker runs up
//! to N messages ahead of their acknowledgements; 0, the default: none).
//!
//! A run fails if a drain does not finish by `--deadline-s`, or if the
//! handled events are not exactly the published ones in per-key order.

use std::num::{NonZeroU64, NonZeroUsize};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use fred::prelude::ClientLike as _;
use ordo_core::runtime::domain::RunningDomain;

use crate::baseline::{self, BaselineArgs};
use crate::engine::{self, BENCH_KEYS, Engine, EngineOptions, Filled, Tally};
use crate::redis::BenchRedis;
use crate::redis_info;
use crate::report::{Figure, Report, rate};
use crate::workload::BenchEvent;

/// Options of `ordo-bench throughput`.
#[derive(Debug, Clone, clap::Args)]
pub struct ThroughputArgs {
    /// Events in each backlog.
    #[arg(long, default_value = "200000")]
    pub events: NonZeroU64,
    /// Keys (partitions) the events are spread over, round-robin.
    #[arg(long, default_value = "64")]
    pub keys: NonZeroUsize,
    /// Entries per read: Ordo's fenced read and the baseline's XREADGROUP.
    #[arg(long, default_value = "64")]
    pub batch: NonZeroUsize,
    /// Connections of each instance's command pool (Ordo's default: 8).
    #[arg(long, default_value = "8")]
    pub pool_size: NonZeroUsize,
    /// Events per unit of work when filling the backlog.
    #[arg(long, default_value = "100")]
    pub per_commit: NonZeroUsize,
    /// Engine instance counts to drain a backlog with, one drain each
    /// (comma-separated); the first is compared with the baseline.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub instances: Vec<NonZeroUsize>,
    /// How long one drain may take before the run fails.
    #[arg(long, default_value = "300")]
    pub deadline_s: u64,
    /// The handler's `ack_window`: messages a key's worker runs ahead of
    /// their acknowledgements (0: none, Ordo's default).
    #[arg(long, default_value = "0")]
    pub ack_window: u32,
}

/// One ordered drain's figures.
#[derive(Debug, Clone, Copy)]
struct Drain {
    instances: usize,
    filled: Filled,
    /// From the start of the instances to the first handler run.
    startup: Duration,
    /// From the first handler run to the last.
    elapsed: Duration,
    /// The largest share of the events one instance handled.
    max_share: f64,
    /// What the backlog added to Redis's `used_memory`.
    backlog_bytes: u64,
    /// What publish deduplication keeps for the backlog (every stream's).
    dedup_bytes: u64,
    costs: Costs,
}

/// Runs the drains and the baseline and reports their rates.
pub async fn run(args: &ThroughputArgs, redis: &BenchRedis) -> Result<Report> {
    ensure!(!args.instances.is_empty(), "--instances names no instance count");
    let admin = redis.client().await?;
    engine::delete_matching(&admin, &BENCH_KEYS).await?;
    let mut drains = Vec::with_capacity(args.instances.len());
    for instances in &args.instances {
        let drain = ordered(args, redis, instances.get()).await;
        // Every drain starts from empty partitions, and a shared Redis keeps nothing.
        engine::delete_matching(&admin, &BENCH_KEYS).await?;
        drains.push(drain?);
    }
    let baseline_args = BaselineArgs {
        events: args.events,
        keys: args.keys,
        batch: NonZeroU64::new(args.batch.get() as u64).context("the batch is not zero")?,
        consumers: NonZeroUsize::MIN,
    };
    let baseline = baseline::run(&baseline_args, redis).await?;
    admin.quit().await?;
    report(args, &drains, &baseline)
}

/// Fills a backlog and drains it with `count` instances.
async fn ordered(args: &ThroughputArgs, redis: &BenchRedis, count: usize) -> Result<Drain> {
    let events = args.events.get();
    let tally = Tally::new(args.keys);
    let options = EngineOptions {
        read_batch: args.batch.get(),
        pool_size: args.pool_size.get(),
        ..EngineOptions::new(ordo_core::contract::config::Config::from_toml_str(&format!(
            "[handlers.OrdoBench]\nack_window = {}\n",
            args.ack_window
        ))?)
    };
    let mut engines = Vec::with_capacity(count);
    for n in 0..count {
        let instance = format!("bench-{count}-{n}-{}", std::process::id());
        engines.push(Engine::connect(redis, &instance, &options, tally.clone()).await?);
    }
    let admin = redis.client().await?;
    let memory_before = redis_info::memory(&admin).await?;
    let filled = engine::fill(
        &engines[0].domain,
        0..events,
        args.keys.get(),
        args.per_commit.get(),
        Some(&admin),
    )
    .await?;
    let backlog_bytes = redis_info::memory(&admin).await?.saturating_sub(memory_before);
    let (dedup_bytes, _) = engine::memory_of_matching(&admin, &DEDUP_KEYS).await?;

    let before = Costs::now(&admin).await?;
    let started = Instant::now();
    let running: Vec<RunningDomain> = engines.iter().map(Engine::start).collect();
    let drained = tally
        .wait_for(events, Duration::from_secs(args.deadline_s))
        .await
        .with_context(|| format!("the drain with {count} instance(s) did not finish"));
    let costs = Costs::now(&admin).await?.since(&before);
    admin.quit().await?;
    for domain in running {
        domain
            .shutdown()
            .await
            .context("an engine instance did not shut down cleanly")?;
    }
    for engine in &engines {
        engine.close().await?;
    }
    drained?;

    ensure!(
        tally.handled() == events,
        "{count} instance(s) handled {} events, {events} were published",
        tally.handled()
    );
    let expected: u64 = (0..events).map(|n| BenchEvent::nth(n, args.keys.get()).seq).sum();
    ensure!(
        tally.checksum() == expected && tally.out_of_order() == 0,
        "{count} instance(s) handled other events than the published ones, or out of order \
         (checksum {} != {expected}, {} out of order)",
        tally.checksum(),
        tally.out_of_order()
    );
    let (Some(first), Some(last)) = (tally.first_handled(), tally.last_handled()) else {
        anyhow::bail!("no handler run was recorded");
    };
    let busiest = engines.iter().map(Engine::handled).max().unwrap_or(0);
    Ok(Drain {
        max_share: busiest as f64 / events as f64,
        instances: count,
        filled,
        startup: first.saturating_duration_since(started),
        elapsed: last.saturating_duration_since(first),
        backlog_bytes,
        dedup_bytes,
        costs,
    })
}

/// What publish deduplication keeps per partition: each lane's producer
/// hash and message-id set.
const DEDUP_KEYS: [&str; 2] = ["{bench:*:producers", "{bench:*:published"];

/// What a drain cost: Redis's CPU and script calls, this process's CPU
/// (the engines', and the bench's tally), from the engines' start to the
/// last event handled (the first discovery round included, in which
/// little runs).
#[derive(Debug, Clone, Copy)]
struct Costs {
    redis_cpu: Duration,
    scripts: redis_info::CommandStats,
    process_cpu: Option<Duration>,
}

impl Costs {
    async fn now(admin: &fred::clients::Client) -> Result<Self> {
        Ok(Self {
            redis_cpu: redis_info::cpu(admin).await?,
            scripts: redis_info::command_stats(admin, "fcall").await?,
            process_cpu: redis_info::process_cpu(),
        })
    }

    fn since(&self, earlier: &Costs) -> Self {
        Self {
            redis_cpu: self.redis_cpu.saturating_sub(earlier.redis_cpu),
            scripts: self.scripts.since(earlier.scripts),
            process_cpu: self
                .process_cpu
                .zip(earlier.process_cpu)
                .map(|(now, then)| now.saturating_sub(then)),
        }
    }

    fn report(&self, report: &mut Report, instances: usize, events: u64) {
        let per_message = |total: f64| total / events.max(1) as f64;
        report
            .ratio(
                format!("ordered_script_calls_per_msg_{instances}"),
                per_message(self.scripts.calls as f64),
            )
            .ratio(
                format!("ordered_script_us_per_msg_{instances}"),
                per_message(self.scripts.usec as f64),
            )
            .ratio(
                format!("ordered_redis_cpu_us_per_msg_{instances}"),
                per_message(self.redis_cpu.as_secs_f64() * 1e6),
            );
        if let Some(cpu) = self.process_cpu {
            report.ratio(
                format!("ordered_engine_cpu_us_per_msg_{instances}"),
                per_message(cpu.as_secs_f64() * 1e6),
            );
        }
    }
}

fn report(args: &ThroughputArgs, drains: &[Drain], baseline: &Report) -> Result<Report> {
    let Some(Figure::PerSecond(baseline_rate)) = baseline.get("baseline_msgs_per_s").cloned() else {
        anyhow::bail!("the baseline reported no baseline_msgs_per_s");
    };
    let published: u64 = drains.iter().map(|d| d.filled.events).sum();
    let publishing: Duration = drains.iter().map(|d| d.filled.publish).sum();
    let committing: Duration = drains.iter().map(|d| d.filled.commit).sum();

    let mut report = Report::new();
    report.per_second("publish_msgs_per_s", rate(published, publishing));
    let per_published =
        |cpu: Option<Duration>| cpu.map(|cpu| cpu.as_secs_f64() * 1e6 / published.max(1) as f64);
    let summed = |cpu: fn(&Filled) -> Option<Duration>| {
        drains.iter().map(|d| cpu(&d.filled)).sum::<Option<Duration>>()
    };
    if let Some(us) = per_published(summed(|f| f.publish_process_cpu)) {
        report.ratio("publish_engine_cpu_us_per_msg", us);
    }
    if let Some(us) = per_published(summed(|f| f.publish_redis_cpu)) {
        report.ratio("publish_redis_cpu_us_per_msg", us);
    }
    report.count(
        "dedup_bytes_per_stream",
        drains[0].dedup_bytes / args.keys.get() as u64,
    );
    for drain in drains {
        report.per_second(
            format!("ordered_msgs_per_s_{}", drain.instances),
            rate(args.events.get(), drain.elapsed),
        );
    }
    report.per_second("baseline_msgs_per_s", baseline_rate);
    let compared = rate(args.events.get(), drains[0].elapsed);
    report.ratio("ratio_ordered_to_baseline", compared / baseline_rate);
    report
        .count("events", args.events.get())
        .count("keys", args.keys.get() as u64)
        .count("batch", args.batch.get() as u64)
        .count("per_commit", args.per_commit.get() as u64)
        .count("pool_size", args.pool_size.get() as u64)
        .per_second("commit_msgs_per_s", rate(published, committing))
        .count(
            "redis_bytes_per_pending_msg",
            drains[0].backlog_bytes / args.events.get(),
        );
    for drain in drains {
        report
            .millis(format!("ordered_startup_ms_{}", drain.instances), drain.startup)
            .millis(format!("ordered_elapsed_ms_{}", drain.instances), drain.elapsed)
            .ratio(format!("ordered_max_share_{}", drain.instances), drain.max_share);
        drain
            .costs
            .report(&mut report, drain.instances, args.events.get());
    }
    if let Some(elapsed) = baseline.get("elapsed_ms") {
        report.push("baseline_elapsed_ms", elapsed.clone());
    }
    Ok(report)
}

//! `scale`: many keys through one category, per key in order, with a fixed
//! number of hashed partitions (`--partitions N`) or one partition per key
//! (`--partitions per_key`, to compare).
//!
//! 1. `--events-per-key` events of each of `--keys` keys are published with
//!    the broker's publish, `--publish-batch` at a time and a few batches
//!    in flight, interleaved (event `n` is key `n % keys`'s number
//!    `n / keys`, so every key is busy at once): `publish_msgs_per_s`.
//! 2. One engine instance in this process (Ordo's defaults, `reap_idle_ms`
//!    of a day so nothing is retired during the run) drains them with a
//!    trivial handler that records, per key, the last event handled (4
//!    bytes a key) and, per event, whether it was handled (1 bit):
//!    `ordered_msgs_per_s` from the first handler run to the last.
//!    `order_violations` counts events that were not their key's next one,
//!    `lost` the events never handled, `repeats` those handled twice:
//!    every key is checked, not a sample. `engine_rss_peak_mb` is this
//!    process's resident memory at its highest during the drain (the
//!    engine's, and the bench's own records), `drain_top_commands` what
//!    Redis spent its time on meanwhile (`INFO commandstats`).
//! 3. `leases`: the lease keys of the handler's group in Redis (`SCAN`),
//!    and `owned_partitions` those of the category's partitions held by
//!    the instance (N, or one per key).
//! 4. Idle (unless `--window-s 0`): once the publishes' deduplication
//!    window has passed (its id sets expire then) and `--settle-s` more,
//!    `redis_bytes_per_idle_key` is what Redis's `used_memory` grew by since
//!    before publishing, over the keys, and `idle_redis_cpu_ms_per_s` the
//!    CPU time Redis used per second over `--window-s` (`INFO cpu`), as
//!    `ordo-bench idle` measures it for per-key partitions.
//!
//! The run fails if the drain does not finish by `--deadline-s`, or if an
//! event is lost, out of its key's order or handled twice.

use std::collections::VecDeque;
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use fred::clients::Client;
use fred::prelude::ClientLike as _;
use fred::types::Value;
use ordo_core::Partitions;
use ordo_core::contract::broker::{Broker as _, Publication};
use ordo_core::contract::key::{DEFAULT_BACKFILL_SUFFIX, Lane};
use ordo_redis::{PartitionId, PartitionKeys, RedisBroker};

use crate::engine::{self, BENCH_KEYS, Engine, EngineOptions, GROUP, Tally};
use crate::redis::BenchRedis;
use crate::redis_info::{self, CommandStats};
use crate::report::{Report, rate};
use crate::workload::{BenchEvent, CATEGORY, envelope, key_name};

/// A day: no partition is retired during a run.
const REAP_IDLE_MS: u64 = 86_400_000;

/// Publish batches in flight at once (fewer when the keys are too few for
/// two batches in flight to never hold events of one key).
const PUBLISHES_IN_FLIGHT: usize = 4;

/// How often the drain samples progress and this process's memory.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// Lease keys read per pipeline when counting owned partitions.
const GET_CHUNK: usize = 1_000;

/// Commands named in `drain_top_commands`.
const TOP_COMMANDS: usize = 6;

/// Options of `ordo-bench scale`.
#[derive(Debug, Clone, clap::Args)]
pub struct ScaleArgs {
    /// Distinct keys, `k0`...
    #[arg(long, default_value = "100000")]
    pub keys: NonZeroUsize,
    /// Events published to each key.
    #[arg(long, default_value = "3")]
    pub events_per_key: NonZeroU32,
    /// The category's partitions: a number of hashed partitions, or
    /// `per_key` (one partition per key).
    #[arg(long, default_value = "256", value_parser = parse_partitions)]
    pub partitions: Partitions,
    /// Events per publish call.
    #[arg(long, default_value = "4096")]
    pub publish_batch: NonZeroUsize,
    /// Entries per fenced read.
    #[arg(long, default_value = "64")]
    pub batch: NonZeroUsize,
    /// Connections of the instance's command pool (Ordo's default: 8).
    #[arg(long, default_value = "8")]
    pub pool_size: NonZeroUsize,
    /// How long Redis's idle CPU is measured after the drain; 0 skips the
    /// idle measurements (and the wait for the deduplication window).
    #[arg(long, default_value = "10")]
    pub window_s: f64,
    /// How long to wait, once the deduplication window has passed, before
    /// measuring the idle figures.
    #[arg(long, default_value = "3")]
    pub settle_s: f64,
    /// The publishes' deduplication window (Ordo's default: 60): the id
    /// sets it keeps expire once it has passed since the last publish, and
    /// the idle figures are measured after that.
    #[arg(long, default_value = "60")]
    pub dedup_window_s: f64,
    /// How long the drain may take before the run fails.
    #[arg(long, default_value = "1800")]
    pub deadline_s: u64,
}

/// Parses `--partitions`: `per_key`, or a number of hashed partitions
/// within the bounds `domain.toml` accepts.
pub fn parse_partitions(text: &str) -> Result<Partitions, String> {
    let text = text.trim();
    let value = if text == "per_key" {
        "\"per_key\"".to_owned()
    } else {
        text.parse::<u32>()
            .map_err(|_| format!("`{text}` is neither `per_key` nor a number of partitions"))?
            .to_string()
    };
    let config =
        ordo_core::Config::from_toml_str(&format!("[categories.{CATEGORY}]\npartitions = {value}\n"))
            .map_err(|error| error.to_string())?;
    Ok(config.partitions(CATEGORY))
}

/// Publishes, drains, verifies and measures.
pub async fn run(args: &ScaleArgs, redis: &BenchRedis) -> Result<Report> {
    for (name, seconds) in [
        ("--window-s", args.window_s),
        ("--settle-s", args.settle_s),
        ("--dedup-window-s", args.dedup_window_s),
    ] {
        ensure!(
            seconds.is_finite() && seconds >= 0.0,
            "{name} must be a number of seconds, not {seconds}"
        );
    }
    let events = args.keys.get() as u64 * u64::from(args.events_per_key.get());
    ensure!(
        u32::try_from(args.keys.get()).is_ok(),
        "--keys {} is above 4,294,967,295, the most keys a run records",
        args.keys
    );
    let admin = redis.client().await?;
    engine::delete_matching(&admin, &BENCH_KEYS).await?;
    let result = measure(args, redis, &admin, events).await;
    engine::delete_matching(&admin, &BENCH_KEYS).await?;
    admin.quit().await?;
    result
}

async fn measure(args: &ScaleArgs, redis: &BenchRedis, admin: &Client, events: u64) -> Result<Report> {
    let keys = args.keys.get();
    let tally = Tally::with_events(args.keys, args.events_per_key);
    let instance = format!("bench-scale-{}", std::process::id());
    let config = engine::config(Some(REAP_IDLE_MS))?.with_partitions(CATEGORY, args.partitions);
    let options = EngineOptions {
        read_batch: args.batch.get(),
        pool_size: args.pool_size.get(),
        publish_dedup_window: Some(Duration::from_secs_f64(args.dedup_window_s)),
        ..EngineOptions::new(config)
    };
    let rss_before = redis_info::resident_bytes();
    let memory_before = redis_info::memory(admin).await?;
    let engine = Engine::connect(redis, &instance, &options, tally.clone()).await?;

    let started = Instant::now();
    publish(&engine.broker, keys, events, args.publish_batch.get()).await?;
    let publishing = started.elapsed();
    let published_at = Instant::now();
    let backlog_bytes = redis_info::memory(admin).await?.saturating_sub(memory_before);

    let commands_before = redis_info::all_command_stats(admin).await?;
    let cpu_before = redis_info::cpu(admin).await?;
    let started = Instant::now();
    let measured = engine
        .run(async {
            let drain = drain(&tally, events, Duration::from_secs(args.deadline_s)).await?;
            let commands =
                redis_info::busiest_commands(&redis_info::all_command_stats(admin).await?, &commands_before);
            let drain_cpu = redis_info::cpu(admin).await?.saturating_sub(cpu_before);
            let leases = Leases::count(admin, args.partitions, keys, &instance).await?;
            let idle = if args.window_s > 0.0 {
                Some(idle(args, admin, published_at).await?)
            } else {
                None
            };
            anyhow::Ok((drain, commands, drain_cpu, leases, idle))
        })
        .await?;
    let (drain, commands, drain_cpu, leases, idle) = measured?;

    let lost = tally.missing().context("the tally records events")?;
    let repeats = tally.repeats().context("the tally records events")?;
    let (Some(first), Some(last)) = (tally.first_handled(), tally.last_handled()) else {
        anyhow::bail!("no handler run was recorded");
    };
    let elapsed = last.saturating_duration_since(first);
    let mb = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);

    let mut report = Report::new();
    report
        .text("partitions", args.partitions.to_string())
        .count("keys", keys as u64)
        .count("events_per_key", u64::from(args.events_per_key.get()))
        .count("events", events)
        .count("busy_keys", keys as u64)
        .count("handled", tally.handled())
        .count("lost", lost)
        .count("order_violations", tally.out_of_order())
        .count("repeats", repeats)
        .count("keys_short", tally.keys_short_of(args.events_per_key.get()))
        .count("leases", leases.in_redis)
        .count("owned_partitions", leases.owned)
        .count("expected_partitions", leases.expected)
        .per_second("publish_msgs_per_s", rate(events, publishing))
        .per_second("ordered_msgs_per_s", rate(events, elapsed))
        .millis("ordered_startup_ms", first.saturating_duration_since(started))
        .millis("ordered_elapsed_ms", elapsed)
        .millis("drain_wait_ms", drain.waited)
        .ratio(
            "drain_redis_cpu_us_per_msg",
            drain_cpu.as_secs_f64() * 1e6 / events as f64,
        )
        .text("drain_top_commands", top_commands(&commands))
        .count("redis_bytes_per_pending_msg", backlog_bytes / events);
    if let Some(idle) = &idle {
        report
            .millis(
                "idle_redis_cpu_ms_per_s",
                idle.cpu.div_f64(idle.window.as_secs_f64().max(f64::MIN_POSITIVE)),
            )
            .count("idle_redis_used_memory_bytes", idle.memory)
            .count(
                "redis_bytes_per_idle_key",
                idle.memory.saturating_sub(memory_before) / keys as u64,
            )
            .count("idle_redis_keys", idle.redis_keys)
            .ratio(
                "idle_script_calls_per_s",
                idle.script_calls as f64 / idle.window.as_secs_f64(),
            );
    }
    if let Some(rss) = idle.as_ref().and_then(|idle| idle.rss).or(drain.rss_end) {
        report.ratio("engine_rss_mb", mb(rss));
    }
    if let Some(peak) = drain.rss_peak {
        report.ratio("engine_rss_peak_mb", mb(peak));
    }
    if let Some(before) = rss_before {
        report.ratio("bench_rss_before_engine_mb", mb(before));
    }
    if lost > 0 {
        report.fail(format!("lost: {lost} of {events} events were never handled"));
    }
    if tally.out_of_order() > 0 {
        report.fail(format!(
            "order_violations: {} events were not their key's next one",
            tally.out_of_order()
        ));
    }
    if repeats > 0 {
        report.fail(format!("repeats: {repeats} events were handled more than once"));
    }
    Ok(report)
}

/// Publishes `events` events over `keys` keys, interleaved, `batch` per
/// publish call. Batches overlap only when no key has events in two
/// batches in flight: a batch starts once every batch `in_flight` or more
/// before it is written, and a key's events are `keys` apart.
async fn publish(broker: &RedisBroker, keys: usize, events: u64, batch: usize) -> Result<()> {
    let in_flight = (keys / batch).clamp(1, PUBLISHES_IN_FLIGHT);
    let mut calls: VecDeque<tokio::task::JoinHandle<Result<()>>> = VecDeque::new();
    let mut next = 0_u64;
    while next < events {
        let end = (next + batch as u64).min(events);
        let publications = (next..end)
            .map(|n| {
                let event = BenchEvent::nth(n, keys);
                let key = event.key.clone();
                Ok(Publication::to_partition(key, Lane::Primary, envelope(&event)?))
            })
            .collect::<Result<Vec<_>>>()?;
        if calls.len() >= in_flight
            && let Some(call) = calls.pop_front()
        {
            call.await.context("a publish task panicked")??;
        }
        let broker = broker.clone();
        let first = next;
        calls.push_back(tokio::spawn(async move {
            broker
                .publish(&publications)
                .await
                .with_context(|| format!("publishing events {first}.. failed"))
        }));
        next = end;
    }
    for call in calls {
        call.await.context("a publish task panicked")??;
    }
    Ok(())
}

/// What the drain saw of this process.
#[derive(Debug, Clone, Copy)]
struct Drained {
    /// From the engine's start to the last event counted.
    waited: Duration,
    rss_peak: Option<u64>,
    rss_end: Option<u64>,
}

/// Waits until `events` were handled, sampling this process's memory.
async fn drain(tally: &Tally, events: u64, deadline: Duration) -> Result<Drained> {
    let started = Instant::now();
    let mut rss_peak = redis_info::resident_bytes();
    let mut last_report = Instant::now();
    while tally.handled() < events {
        ensure!(
            started.elapsed() < deadline,
            "handled {} of {events} events within {deadline:?}",
            tally.handled()
        );
        tokio::time::sleep(SAMPLE_EVERY).await;
        rss_peak = rss_peak.max(redis_info::resident_bytes());
        if last_report.elapsed() >= Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!(
                "scale: {} of {events} events handled after {:.0} s",
                tally.handled(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(Drained {
        waited: started.elapsed(),
        rss_peak,
        rss_end: redis_info::resident_bytes(),
    })
}

/// The leases of the run.
#[derive(Debug, Clone, Copy)]
struct Leases {
    /// Lease keys of the handler's group in Redis.
    in_redis: u64,
    /// The category's partitions (N, or one per key).
    expected: u64,
    /// Of those, the ones whose lease the instance holds.
    owned: u64,
}

impl Leases {
    async fn count(admin: &Client, partitions: Partitions, keys: usize, instance: &str) -> Result<Self> {
        let names: Vec<String> = match partitions {
            Partitions::Hashed(n) => (0..n.get())
                .map(|index| lease_of(PartitionId::hashed(CATEGORY, index)))
                .collect(),
            Partitions::PerKey => (0..keys)
                .map(|index| lease_of(PartitionId::for_key(CATEGORY, &key_name(index))))
                .collect(),
        };
        let prefix = format!("{instance}:");
        let mut owned = 0;
        for chunk in names.chunks(GET_CHUNK) {
            let pipeline = admin.pipeline();
            for lease in chunk {
                let _: () = fred::prelude::KeysInterface::get(&pipeline, lease)
                    .await
                    .context("queueing a lease GET failed")?;
            }
            let values: Vec<Value> = pipeline.all().await.context("reading the leases failed")?;
            owned += values
                .iter()
                .filter(|value| value.as_str().is_some_and(|v| v.starts_with(&prefix)))
                .count() as u64;
        }
        Ok(Self {
            in_redis: count_matching(admin, &format!("*:lease:{GROUP}")).await?,
            expected: names.len() as u64,
            owned,
        })
    }
}

/// The lease key of the handler's group on partition `id`.
fn lease_of(id: PartitionId) -> String {
    PartitionKeys::of(id, DEFAULT_BACKFILL_SUFFIX).lease(GROUP).lease
}

/// How many keys match `pattern` (`SCAN`, on the one server `admin` talks to).
async fn count_matching(admin: &Client, pattern: &str) -> Result<u64> {
    let mut count = 0;
    engine::each_matching_page(admin, pattern, async |keys| {
        count += keys.len() as u64;
        Ok(())
    })
    .await?;
    Ok(count)
}

/// The idle figures after the drain.
#[derive(Debug, Clone, Copy)]
struct Idle {
    memory: u64,
    redis_keys: u64,
    rss: Option<u64>,
    cpu: Duration,
    window: Duration,
    script_calls: u64,
}

/// Waits for the deduplication window to pass since the last publish and
/// `--settle-s` more, then reads Redis's memory and its CPU over `--window-s`.
async fn idle(args: &ScaleArgs, admin: &Client, published_at: Instant) -> Result<Idle> {
    let dedup_left = Duration::from_secs_f64(args.dedup_window_s).saturating_sub(published_at.elapsed());
    if !dedup_left.is_zero() {
        eprintln!(
            "scale: waiting {:.0} s for the publishes' deduplication window to pass",
            dedup_left.as_secs_f64()
        );
    }
    tokio::time::sleep(dedup_left + Duration::from_secs_f64(args.settle_s)).await;
    let memory = redis_info::memory(admin).await?;
    let redis_keys = redis_info::key_count(admin).await?;
    let rss = redis_info::resident_bytes();
    let window = Duration::from_secs_f64(args.window_s);
    let cpu_before = redis_info::cpu(admin).await?;
    let scripts_before = redis_info::command_stats(admin, "fcall").await?;
    tokio::time::sleep(window).await;
    let cpu = redis_info::cpu(admin).await?.saturating_sub(cpu_before);
    let scripts = redis_info::command_stats(admin, "fcall")
        .await?
        .since(scripts_before);
    Ok(Idle {
        memory,
        redis_keys,
        rss,
        cpu,
        window,
        script_calls: scripts.calls,
    })
}

/// `fcall=1200:45000us,...`: the busiest commands' calls and time.
fn top_commands(commands: &[(String, CommandStats)]) -> String {
    commands
        .iter()
        .take(TOP_COMMANDS)
        .map(|(command, stats)| format!("{command}={}:{}us", stats.calls, stats.usec))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_parse_as_per_key_or_a_bounded_number() {
        assert_eq!(parse_partitions("per_key"), Ok(Partitions::PerKey));
        assert_eq!(
            parse_partitions("256"),
            Ok(Partitions::Hashed(NonZeroU32::new(256).unwrap()))
        );
        assert!(parse_partitions("0").unwrap_err().contains("between 1 and"));
        assert!(parse_partitions("many").unwrap_err().contains("per_key"));
    }

    #[test]
    fn the_busiest_commands_print_with_calls_and_time() {
        let commands = [
            ("fcall".to_owned(), CommandStats { calls: 3, usec: 90 }),
            ("xadd".to_owned(), CommandStats { calls: 1, usec: 4 }),
        ];
        assert_eq!(top_commands(&commands), "fcall=3:90us,xadd=1:4us");
    }
}

//! `ordo-bench`: Ordo's benchmarks and checkers, one subcommand each.
//!
//! Every subcommand prints its figures one `name: value` per line (or one
//! JSON object with `--json`) and runs on a private Redis unless
//! `--redis-url` / `REDIS_URL` names one. Build with `--release` to measure.
//!
//! Adding a subcommand: a module in the library with its `clap::Args` struct
//! and an `async fn run(&Args, &BenchRedis) -> Result<Report>`, a variant of
//! [`Bench`], and a line in [`run`]. A checker that finds a violation calls
//! [`Report::fail`]: the figures are printed and the exit status is non-zero.

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use ordo_bench::Report;
use ordo_bench::baseline::{self, BaselineArgs};
use ordo_bench::chaos::{self, ChaosArgs};
use ordo_bench::commands::{self, CommandsArgs};
use ordo_bench::connect::{self, ConnectArgs};
use ordo_bench::failover::{self, FailoverArgs};
use ordo_bench::handler_latency::{self, LatencyArgs};
use ordo_bench::idle::{self, IdleArgs};
use ordo_bench::redis::RedisArgs;
use ordo_bench::relay::{self, RelayArgs};
use ordo_bench::scale::{self, ScaleArgs};
use ordo_bench::sweep::{self, SweepArgs};
use ordo_bench::throughput::{self, ThroughputArgs};
use ordo_bench::worker::{self, WorkerArgs};

#[derive(Debug, Parser)]
#[command(name = "ordo-bench", version, about = "Ordo's benchmarks and checkers")]
struct Cli {
    /// Print the figures as one JSON object instead of `name: value` lines.
    #[arg(long, global = true)]
    json: bool,
    #[command(flatten)]
    redis: RedisArgs,
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Drain a pre-filled backlog with a plain Redis consumer group
    /// (XREADGROUP/XACK, no leases, no ordering): `baseline_msgs_per_s`.
    Baseline(BaselineArgs),
    /// Publish through the outbox, drain the backlog with Ordo's ordered
    /// consumer (1 and 2 instances) and with the baseline, in one run:
    /// `publish_msgs_per_s`, `ordered_msgs_per_s_N`, `baseline_msgs_per_s`,
    /// `ratio_ordered_to_baseline`.
    Throughput(ThroughputArgs),
    /// `throughput` with one instance over several key counts, the median of
    /// `--rounds` per count: `ratio_keys_<K>`, `ordered_msgs_per_s_keys_<K>`,
    /// `engine_cpu_us_per_msg_keys_<K>`, `redis_cpu_us_per_msg_keys_<K>`;
    /// `--svg` plots the ratio against keys (beside `--previous`, another
    /// build's `--points`).
    Sweep(SweepArgs),
    /// Commit to handler start at a fixed offered load:
    /// `latency_p50_ms`, `latency_p99_ms`.
    Latency(LatencyArgs),
    /// Commands sent across instances on Redis, against the inline broker:
    /// `command_rtt_p50_ms`, `command_rtt_p99_ms` (one sender, one owner, a
    /// fixed offered load), `local_owner_rtt_p50_ms` (the owner sending: run
    /// in place), `remote_commands_per_s` (a closed loop, every command
    /// crossing), `commands_per_s`, `cpu_us_per_command`,
    /// `redis_cpu_us_per_command` (a closed loop over two instances), and
    /// `inline_commands_per_s`, `inline_rtt_p50_ms` (the same loop in process).
    Commands(CommandsArgs),
    /// Commands one instance sends per second while it owns many idle
    /// partitions: `idle_redis_cmds_per_s`, `owned_partitions`.
    Idle(IdleArgs),
    /// SIGKILL of a key's owner to the next owner's first handled message,
    /// per lease TTL: `failover_ms_ttl_<ttl>`.
    Failover(FailoverArgs),
    /// Faults injected into N engine processes and Redis while events flow,
    /// then the guarantee verified: `overlaps`, `order_violations`, `lost`
    /// (non-zero fails the run), `duplicates`, `max_failover_ms`, `seed`.
    /// With `--postgres`: the outbox in PostgreSQL, relays in the workers,
    /// effects through the PostgreSQL fence (`duplicates` must be 0 too).
    Chaos(ChaosArgs),
    /// The PostgreSQL outbox: commits per second by concurrent writers
    /// (`outbox_commits_per_s`), a backlog published by 1 and 3 relays
    /// (`relay_msgs_per_s_1`, `relay_msgs_per_s_3`), and commit to handler
    /// start through a NOTIFY-woken relay (`relay_latency_p50_ms`, `_p99_ms`).
    Relay(RelayArgs),
    /// Events of many keys through one category with hashed partitions
    /// (`--partitions N`, or `per_key` to compare), every key checked:
    /// `lost`, `order_violations`, `leases`, `ordered_msgs_per_s`,
    /// `idle_redis_cpu_ms_per_s`, `redis_bytes_per_idle_key`, `engine_rss_mb`.
    Scale(ScaleArgs),
    /// Connection set-up (connect, handshake, PING) over plain TCP, TLS and
    /// mutual TLS to a private TLS redis-server: `connect_plain_p50_ms`,
    /// `connect_tls_p50_ms`, `connect_mtls_p50_ms`, `tls_to_plain_p50_ratio`.
    Connect(ConnectArgs),
    /// One engine instance in its own process, until SIGTERM (spawned by
    /// the benchmarks that kill instances; prints the harness's lines).
    #[command(hide = true)]
    Worker(WorkerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let report = match tokio::runtime::Runtime::new()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(run(cli.bench, &cli.redis)))
    {
        Ok(report) => report,
        Err(error) => {
            // `{:#}` prints the chain of causes on one line.
            eprintln!("error: {error:#}");
            return ExitCode::FAILURE;
        }
    };
    print!(
        "{}",
        if cli.json {
            report.to_json()
        } else {
            report.to_text()
        }
    );
    for failure in report.failures() {
        eprintln!("FAILED: {failure}");
    }
    if report.failures().is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Warnings and errors of Ordo's runtime on stderr (`RUST_LOG` to change);
/// the Redis client's warnings only from `error` up, since it warns about
/// every connection a Redis restart drops.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,fred=error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

async fn run(bench: Bench, redis: &RedisArgs) -> Result<Report> {
    match bench {
        Bench::Baseline(args) => baseline::run(&args, &redis.start().await?).await,
        Bench::Throughput(args) => throughput::run(&args, &redis.start().await?).await,
        Bench::Sweep(args) => sweep::run(&args, &redis.start().await?).await,
        Bench::Latency(args) => handler_latency::run(&args, &redis.start().await?).await,
        Bench::Commands(args) => commands::run(&args, &redis.start().await?).await,
        Bench::Idle(args) => idle::run(&args, &redis.start().await?).await,
        Bench::Failover(args) => failover::run(&args, &redis.start().await?).await,
        Bench::Chaos(args) => chaos::run(&args, redis).await,
        Bench::Relay(args) => relay::run(&args, &redis.start().await?).await,
        Bench::Connect(args) => connect::run(&args).await,
        Bench::Scale(args) => scale::run(&args, &redis.start().await?).await,
        Bench::Worker(args) => {
            let url = redis
                .redis_url
                .as_ref()
                .map(ordo_redis::SecretUrl::expose)
                .context("`worker` needs --redis-url or REDIS_URL")?;
            worker::run(&args, url, &redis.tls_files)
                .await
                .map(|()| Report::new())
        }
    }
}

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
use ordo_bench::redis::RedisArgs;
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
    /// One engine instance in its own process, until SIGTERM (spawned by
    /// the benchmarks that kill instances; prints the harness's lines).
    #[command(hide = true)]
    Worker(WorkerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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

async fn run(bench: Bench, redis: &RedisArgs) -> Result<Report> {
    match bench {
        Bench::Baseline(args) => baseline::run(&args, &redis.start().await?).await,
        Bench::Worker(args) => {
            let url = redis.redis_url.as_deref().context("`worker` needs --redis-url or REDIS_URL")?;
            worker::run(&args, url).await.map(|()| Report::new())
        }
    }
}

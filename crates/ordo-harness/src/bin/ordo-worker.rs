//! `ordo-worker`: an Ordo engine instance consuming the `chaos` category
//! (`run`), a publisher of numbered events (`publish`), and the checker of
//! what the instances recorded (`verify`).
//!
//! ```text
//! ordo-worker run --redis-url redis://127.0.0.1:6379 --instance w1
//! ordo-worker publish --redis-url redis://127.0.0.1:6379 --keys 16 --events 50
//! ordo-worker verify --redis-url redis://127.0.0.1:6379
//! ```
//!
//! `run` prints machine-readable lines (see `ordo_harness::line`) on stdout
//! and logs on stderr (`RUST_LOG`, default `warn`); SIGTERM or SIGINT shut
//! it down gracefully, releasing its leases.

use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use ordo_harness::publisher::{self, PublishOptions};
use ordo_harness::worker::{self, WorkerOptions};

#[derive(Debug, Parser)]
#[command(
    name = "ordo-worker",
    about = "An Ordo worker for process-level tests and chaos runs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Consume `chaos` events until SIGTERM.
    Run(RunArgs),
    /// Publish numbered events through the outbox, then exit.
    Publish(PublishArgs),
    /// Check the recorded effects; exits 1 when the guarantee was broken.
    Verify(VerifyArgs),
}

#[derive(Debug, Args)]
struct RedisArgs {
    /// The Redis URL.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    redis_url: ordo_redis::SecretUrl,
}

#[derive(Debug, Args)]
struct VerifyArgs {
    #[command(flatten)]
    redis: RedisArgs,
    /// Print the verdict, with every key's records, as JSON.
    #[arg(long)]
    json: bool,
    /// The workers' hashed partitions (default: a partition per key).
    #[arg(long)]
    hashed_partitions: Option<NonZeroU32>,
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    redis: RedisArgs,
    /// This instance's id, unique among live workers.
    #[arg(long)]
    instance: String,
    /// Lease lifetime.
    #[arg(long, default_value_t = 2_000)]
    lease_ttl_ms: u64,
    /// Lease renewal interval (at most a third of the TTL).
    #[arg(long, default_value_t = 300)]
    heartbeat_ms: u64,
    /// Idle poll interval.
    #[arg(long, default_value_t = 100)]
    poll_ms: u64,
    /// Partition discovery and rebalancing interval.
    #[arg(long, default_value_t = 200)]
    discovery_ms: u64,
    /// Idle time before a drained partition is retired.
    #[arg(long, default_value_t = 3_600_000)]
    reap_idle_ms: u64,
    /// Retries after a handler's first failure, before the partition halts.
    #[arg(long, default_value_t = 2)]
    max_retries: u32,
    /// First retry delay.
    #[arg(long, default_value_t = 20)]
    backoff_initial_ms: u64,
    /// Retry delay cap.
    #[arg(long, default_value_t = 200)]
    backoff_max_ms: u64,
    /// The `chaos` category in this many hashed partitions (default: a
    /// partition per key).
    #[arg(long)]
    hashed_partitions: Option<NonZeroU32>,
    /// Handler runs at once in the process (default: the configuration's).
    #[arg(long)]
    max_concurrency: Option<NonZeroUsize>,
    /// Messages a key's worker runs ahead of their acknowledgements
    /// (`[handlers.TickRecorder] ack_window`; 0: none).
    #[arg(long, default_value_t = 0)]
    ack_window: u32,
    /// Each run is the handler's own task and works in blocking code
    /// (`std::thread::sleep`), which aborting it cannot interrupt; its
    /// start is recorded with Redis's time.
    #[arg(long)]
    blocking_work: bool,
    /// Run the `Poke` command handler and send commands for the shared
    /// keys `c0`..`c{N-1}` (0: no commands).
    #[arg(long, default_value_t = 0)]
    command_keys: usize,
}

#[derive(Debug, Args)]
struct PublishArgs {
    #[command(flatten)]
    redis: RedisArgs,
    /// Publish to keys `k0`..`k{N-1}`.
    #[arg(long, conflicts_with = "key")]
    keys: Option<usize>,
    /// Publish to this key (repeatable).
    #[arg(long)]
    key: Vec<String>,
    /// Events per key.
    #[arg(long)]
    events: u64,
    /// The seq of each key's first event.
    #[arg(long, default_value_t = 0)]
    first_seq: u64,
    /// How long each run of these events works.
    #[arg(long, default_value_t = 0)]
    work_ms: u64,
    /// How long each run of these events lingers after committing its
    /// effect, before the broker acknowledges it.
    #[arg(long, default_value_t = 0)]
    linger_ms: u64,
    /// Make these events poison: every run of them fails.
    #[arg(long)]
    poison: bool,
    /// How long to wait for the outbox to be published.
    #[arg(long, default_value_t = 30_000)]
    deadline_ms: u64,
    /// The workers' hashed partitions (default: a partition per key).
    #[arg(long)]
    hashed_partitions: Option<NonZeroU32>,
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Run(args) => run(args).await,
        Command::Publish(args) => publish(args).await,
        Command::Verify(args) => verify(args).await,
    }
}

async fn run(args: RunArgs) -> Result<()> {
    let options = WorkerOptions {
        redis_url: args.redis.redis_url.expose().to_owned(),
        instance: args.instance,
        lease_ttl_ms: args.lease_ttl_ms,
        heartbeat_ms: args.heartbeat_ms,
        poll_ms: args.poll_ms,
        discovery_ms: args.discovery_ms,
        reap_idle_ms: args.reap_idle_ms,
        max_retries: args.max_retries,
        backoff_initial_ms: args.backoff_initial_ms,
        backoff_max_ms: args.backoff_max_ms,
        tls: ordo_redis::TlsFiles::new(),
        hashed_partitions: args.hashed_partitions,
        max_concurrency: args.max_concurrency,
        ack_window: args.ack_window,
        blocking_work: args.blocking_work,
        command_keys: args.command_keys,
    };
    let shutdown = worker::shutdown_on_signal()?;
    worker::run(&options, shutdown)
        .await
        .with_context(|| format!("worker `{}` failed", options.instance))
}

async fn publish(args: PublishArgs) -> Result<()> {
    let keys = match args.keys {
        Some(count) => publisher::key_names(count),
        None => args.key,
    };
    if keys.is_empty() {
        bail!("no keys to publish to: give --keys N or --key NAME");
    }
    let options = PublishOptions {
        redis_url: args.redis.redis_url.expose().to_owned(),
        keys,
        events: args.events,
        first_seq: args.first_seq,
        work_ms: args.work_ms,
        linger_ms: args.linger_ms,
        poison: args.poison,
        deadline: Duration::from_millis(args.deadline_ms),
        hashed_partitions: args.hashed_partitions,
    };
    let published = publisher::publish(&options).await.context("publishing failed")?;
    println!("published events={published}");
    Ok(())
}

async fn verify(args: VerifyArgs) -> Result<()> {
    use fred::prelude::{Builder, ClientLike};
    let config = ordo_redis::client_config(args.redis.redis_url.expose()).context("invalid --redis-url")?;
    let client = Builder::from_config(config).build()?;
    client.init().await.context("cannot connect to Redis")?;
    let config = ordo_harness::tick::config(args.hashed_partitions);
    let records = ordo_harness::keys::Records::new(ordo_redis::Routing::new(&config));
    let verdict = ordo_harness::verify::verify_with(&client, &records).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&verdict)?);
    } else {
        println!("{verdict}");
    }
    if !verdict.is_sound() {
        std::process::exit(1);
    }
    Ok(())
}

//! `ordo-pg-relay`: publishes a PostgreSQL outbox to Redis, as a process of
//! its own. Run as many as you like against one database.
//!
//! ```text
//! ordo-pg-relay [--config PATH]         run a relay until SIGTERM or Ctrl-C
//! ordo-pg-relay adopt [--config PATH]   adopt Redis's positions where they
//!                                       come from another history of the
//!                                       database, then exit
//! ```
//!
//! The domain configuration (`domain.toml`: `[categories]` says which
//! categories Redis keeps in hashed partitions, `[server.priority_lanes]`
//! the backfill suffix, `[server.partitioning]` the retry backoff) is
//! `--config PATH`, else `ORDO_CONFIG`, else `domain.toml` in the current
//! directory when there is one, else the defaults. A category Redis
//! partitions otherwise than the configuration says is refused (its rows
//! stay pending, logged as `outbox.publish_refused`); every other category
//! is published.
//!
//! Environment:
//! - `DATABASE_URL` (required): `postgres://user@host:port/db`
//! - `REDIS_URL` (required to run): `redis://host:port`
//! - `ORDO_CONFIG`: the domain configuration (see above)
//! - `ORDO_OUTBOX_SCHEMA`: the outbox schema (default `ordo`)
//! - `ORDO_RELAY_LEASE_TTL_MS`: slot lease TTL (default 10000)
//! - `ORDO_RELAY_POLL_MS`: fallback poll when no NOTIFY comes (default: the
//!   smaller of 1000 and a quarter of the TTL)
//! - `ORDO_RELAY_RETENTION_S`: how long published rows are kept (default 86400)
//! - `ORDO_RELAY_BATCH_BYTES`: bytes of envelopes per fetch (default 16 MiB;
//!   a bigger row is published alone)
//! - `ORDO_RELAY_PUBLISH_CALL_BYTES`: bytes per Redis publish call (default 8 MiB)
//! - `ORDO_RELAY_MAX_ROW_BYTES`: a larger row is abandoned (default 512 MiB,
//!   Redis's default `proto-max-bulk-len`)
//!
//! Prints `relay ready <id>` once it runs; stops on SIGTERM or Ctrl-C,
//! releasing its slots.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use ordo_core::config::Config;
use ordo_postgres::{PgOutbox, PgRelay};
use ordo_redis::RedisBroker;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

const USAGE: &str = "usage: ordo-pg-relay [adopt] [--config PATH]";

/// What to do.
#[derive(Debug, PartialEq, Eq)]
enum Command {
    /// Run a relay.
    Run,
    /// Adopt Redis's positions where they come from another history.
    Adopt,
}

/// The command line.
#[derive(Debug)]
struct Args {
    command: Command,
    config: Option<PathBuf>,
}

impl Args {
    fn parse(args: impl IntoIterator<Item = String>) -> anyhow::Result<Self> {
        let mut parsed = Self {
            command: Command::Run,
            config: None,
        };
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "adopt" if parsed.command == Command::Run => parsed.command = Command::Adopt,
                "--config" => {
                    let path = args
                        .next()
                        .with_context(|| format!("--config needs a path; {USAGE}"))?;
                    parsed.config = Some(PathBuf::from(path));
                }
                "-h" | "--help" => {
                    println!("{USAGE}\n(environment: see the crate documentation of ordo-pg-relay)");
                    std::process::exit(0);
                }
                other => match other.strip_prefix("--config=") {
                    Some(path) => parsed.config = Some(PathBuf::from(path)),
                    None => bail!("unknown argument `{other}`; {USAGE}"),
                },
            }
        }
        Ok(parsed)
    }
}

/// The domain configuration: `--config`, else `ORDO_CONFIG`, else
/// `domain.toml` in the current directory, else the defaults.
fn config(flag: Option<&Path>) -> anyhow::Result<Config> {
    let named = flag.map(|path| (path.to_owned(), "--config")).or_else(|| {
        std::env::var_os("ORDO_CONFIG")
            .filter(|value| !value.is_empty())
            .map(|value| (PathBuf::from(value), "ORDO_CONFIG"))
    });
    let path = match named {
        Some((path, source)) if !path.is_file() => {
            bail!("{source} {}: no such file", path.display())
        }
        Some((path, _)) => path,
        None if Path::new("domain.toml").is_file() => PathBuf::from("domain.toml"),
        None => return Ok(Config::default()),
    };
    let config = Config::from_file(&path)
        .with_context(|| format!("cannot read the domain configuration {}", path.display()))?;
    tracing::info!(path = %path.display(), "domain configuration read");
    Ok(config)
}

fn env_number(name: &str) -> anyhow::Result<Option<u64>> {
    match std::env::var(name) {
        Ok(value) => {
            Ok(Some(value.parse().with_context(|| {
                format!("{name}={value:?} is not a whole number")
            })?))
        }
        Err(_) => Ok(None),
    }
}

fn env_bytes(name: &str, default: usize) -> anyhow::Result<usize> {
    Ok(env_number(name)?.map_or(default, |n| usize::try_from(n).unwrap_or(usize::MAX)))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse(std::env::args().skip(1))?;
    let config = config(args.config.as_deref())?;
    let database_url = std::env::var("DATABASE_URL").context("DATABASE_URL must be set")?;
    let schema =
        std::env::var("ORDO_OUTBOX_SCHEMA").unwrap_or_else(|_| ordo_postgres::DEFAULT_SCHEMA.to_owned());
    let ttl = Duration::from_millis(env_number("ORDO_RELAY_LEASE_TTL_MS")?.unwrap_or(10_000));
    let poll = env_number("ORDO_RELAY_POLL_MS")?
        .map(Duration::from_millis)
        .unwrap_or_else(|| (ttl / 4).min(Duration::from_secs(1)));
    let retention = Duration::from_secs(env_number("ORDO_RELAY_RETENTION_S")?.unwrap_or(86_400));
    let batch_bytes = env_bytes("ORDO_RELAY_BATCH_BYTES", ordo_postgres::DEFAULT_BATCH_BYTES)?;
    let call_bytes = env_bytes("ORDO_RELAY_PUBLISH_CALL_BYTES", 8 << 20)?;
    let max_row_bytes = env_bytes("ORDO_RELAY_MAX_ROW_BYTES", ordo_postgres::DEFAULT_MAX_ROW_BYTES)?;

    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&database_url)
        .await
        .with_context(|| format!("cannot connect to {}", ordo_redis::redact_url(&database_url)))?;
    let outbox = PgOutbox::builder(pool)
        .schema(schema)
        .config(&config)
        .lease_ttl(ttl)
        .max_row_bytes(max_row_bytes)
        .build()?;
    outbox.migrate().await?;
    if args.command == Command::Adopt {
        return adopt(&outbox).await;
    }

    let redis_url = std::env::var("REDIS_URL").context("REDIS_URL must be set")?;
    let broker = RedisBroker::builder(&redis_url)
        .config(config.clone())
        .publish_call_bytes(call_bytes)
        .build()
        .await?;
    let relay = PgRelay::new(outbox.clone(), Arc::new(broker), &config)
        .poll_interval(poll)
        .retention(retention)
        .batch_bytes(batch_bytes);

    let shutdown = CancellationToken::new();
    let mut terminate = signal(SignalKind::terminate())?;
    let stop = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        stop.cancel();
    });
    println!("relay ready {}", outbox.relay_id());
    relay.run(shutdown).await?;
    println!("relay stopped {}", outbox.relay_id());
    Ok(())
}

/// `ordo-pg-relay adopt`: renumbers the pending rows of the scopes whose
/// positions Redis holds from another history, and says what moved.
async fn adopt(outbox: &PgOutbox) -> anyhow::Result<()> {
    let adopted = outbox.adopt().await?;
    if adopted.is_empty() {
        println!(
            "no key of outbox `{}` waits on a position of another history",
            outbox.schema()
        );
        return Ok(());
    }
    for scope in &adopted {
        println!(
            "{}: {} pending rows now follow Redis's position {} (moved by {})",
            scope.scope, scope.pending, scope.broker_position, scope.shift
        );
    }
    println!(
        "adopted Redis's positions for {} keys of outbox `{}`; running relays publish them within seconds",
        adopted.len(),
        outbox.schema()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> anyhow::Result<Args> {
        Args::parse(args.iter().map(|a| (*a).to_owned()))
    }

    #[test]
    fn the_command_line_is_a_command_and_a_configuration() {
        let run = parse(&[]).unwrap();
        assert_eq!((run.command, run.config), (Command::Run, None));
        let adopt = parse(&["adopt", "--config", "d.toml"]).unwrap();
        assert_eq!(adopt.command, Command::Adopt);
        assert_eq!(adopt.config.as_deref(), Some(Path::new("d.toml")));
        assert_eq!(
            parse(&["--config=x.toml"]).unwrap().config.as_deref(),
            Some(Path::new("x.toml"))
        );
        let unknown = parse(&["publish"]).unwrap_err().to_string();
        assert!(unknown.contains("unknown argument `publish`"), "{unknown}");
        assert!(parse(&["--config"]).is_err());
    }
}

//! `ordo-pg-relay`: publishes a PostgreSQL outbox to Redis, as a process of
//! its own. Run as many as you like against one database.
//!
//! Install: `cargo install --path crates/ordo-pg-relay`.
//! `ordo-pg-relay --help` lists the settings; each comes from its flag, else
//! its environment variable, else the domain configuration file (`--config`,
//! else `ORDO_CONFIG`, else `domain.toml` in the current directory when there
//! is one), else its default: the layers of `Config::load`
//! (docs/OPERATIONS.md, "Configuration"). The domain configuration also says
//! which categories Redis keeps in hashed partitions (`[categories]`); a
//! category Redis partitions otherwise is refused (its rows stay pending,
//! logged as `outbox.publish_refused`) and every other one is published.
//!
//! `ordo-pg-relay adopt` renumbers the pending rows of the keys whose
//! positions Redis holds from another history of the database (a restore),
//! then exits (docs/OPERATIONS.md, "The database's history changed").
//!
//! Prints `relay ready <id>` once it runs; stops on SIGTERM or Ctrl-C,
//! releasing its slots.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use ordo_core::contract::config::{Config, ConfigError, Origin};
use ordo_postgres::{PgOutbox, PgRelay};
use ordo_redis::{RedisBroker, RedisConfig, SecretUrl};
use serde::Deserialize;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

const AFTER_HELP: &str = "\
Each setting comes from its flag, else its environment variable, else the
domain configuration file ([redis] url, [outbox] schema, [relay] lease_ttl_ms,
poll_ms, retention_s, batch_bytes, publish_call_bytes, max_row_bytes), else its
default. The Redis URL: --redis-url, else
ORDO_REDIS_URL, else REDIS_URL, else [redis] url. A URL with a password is best
given by environment: a command line is visible to every user of the host (ps).

Prints `relay ready <id>` once it runs; stops on SIGTERM or Ctrl-C, releasing
its slots. Log level: RUST_LOG (default info).";

/// Publishes the PostgreSQL outbox of an Ordo domain to Redis, in commit
/// order per key; run several against one database.
#[derive(Debug, Parser)]
#[command(name = "ordo-pg-relay", version, after_help = AFTER_HELP)]
struct Args {
    /// What to do (default: run a relay until SIGTERM or Ctrl-C).
    #[command(subcommand)]
    command: Option<Command>,
    /// The PostgreSQL database holding the outbox
    /// (`postgres://user@host:port/db`).
    #[arg(long, env = "DATABASE_URL", value_name = "URL", hide_env_values = true)]
    database_url: Option<SecretUrl>,
    /// The Redis to publish to (`redis://host:port/db`); default:
    /// ORDO_REDIS_URL, else REDIS_URL, else `[redis] url`.
    #[arg(long, value_name = "URL")]
    redis_url: Option<SecretUrl>,
    /// The domain configuration file (default: the file ORDO_CONFIG names,
    /// else `domain.toml` in the current directory when there is one).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// The outbox's schema [env: ORDO_OUTBOX_SCHEMA; file: `[outbox] schema`;
    /// default: ordo].
    #[arg(long, value_name = "SCHEMA")]
    outbox_schema: Option<String>,
    /// How long a relay's slot lease lives without renewal, in ms
    /// [env: ORDO_RELAY_LEASE_TTL_MS; file: `[relay] lease_ttl_ms`; default: 10000].
    #[arg(long, value_name = "MS")]
    lease_ttl_ms: Option<u64>,
    /// The fallback poll when no NOTIFY comes, in ms [env: ORDO_RELAY_POLL_MS;
    /// file: `[relay] poll_ms`; default: the smaller of 1000 and a quarter of
    /// the lease TTL].
    #[arg(long, value_name = "MS")]
    poll_ms: Option<u64>,
    /// How long published rows are kept, in seconds
    /// [env: ORDO_RELAY_RETENTION_S; file: `[relay] retention_s`; default: 86400].
    #[arg(long, value_name = "SECONDS")]
    retention_s: Option<u64>,
    /// Bytes of envelopes per fetch; a bigger row is fetched alone
    /// [env: ORDO_RELAY_BATCH_BYTES; file: `[relay] batch_bytes`; default: 16 MiB].
    #[arg(long, value_name = "BYTES")]
    batch_bytes: Option<u64>,
    /// Bytes per Redis publish call; a bigger row goes alone
    /// [env: ORDO_RELAY_PUBLISH_CALL_BYTES; file: `[relay] publish_call_bytes`;
    /// default: 8 MiB].
    #[arg(long, value_name = "BYTES")]
    publish_call_bytes: Option<u64>,
    /// A larger row is abandoned, never published [env: ORDO_RELAY_MAX_ROW_BYTES;
    /// file: `[relay] max_row_bytes`; default: 512 MiB, Redis's `proto-max-bulk-len`].
    #[arg(long, value_name = "BYTES")]
    max_row_bytes: Option<u64>,
}

/// What `ordo-pg-relay` does besides relaying.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Adopt Redis's positions for the keys whose positions Redis holds from
    /// another history of the database (after a restore), then exit.
    Adopt,
}

/// The relay's settings, resolved from the layers.
#[derive(Debug)]
struct Settings {
    database_url: SecretUrl,
    redis_url: SecretUrl,
    schema: String,
    lease_ttl: Duration,
    poll: Duration,
    retention: Duration,
    batch_bytes: usize,
    publish_call_bytes: usize,
    max_row_bytes: usize,
    config: Config,
}

impl Settings {
    fn resolve(args: Args) -> anyhow::Result<Self> {
        // `domain.toml` in the current directory when nothing names a file.
        let file = args.config.or_else(|| {
            let named = std::env::var_os("ORDO_CONFIG").is_some_and(|value| !value.is_empty());
            (!named && Path::new("domain.toml").is_file()).then(|| PathBuf::from("domain.toml"))
        });
        let config = Config::load(file.as_deref()).context("invalid domain configuration")?;
        let database_url = args
            .database_url
            .context("no database: pass --database-url URL or set DATABASE_URL (see --help)")?;
        let redis_url = match args.redis_url {
            Some(url) => url,
            None => redis_url(&config)?,
        };
        let relay = RelayConfig::from_config(&config).context("invalid domain configuration")?;
        let schema = match args.outbox_schema {
            Some(schema) => schema,
            None => config
                .section::<OutboxSchema>("outbox")
                .context("invalid domain configuration")?
                .schema
                .unwrap_or_else(|| ordo_postgres::DEFAULT_SCHEMA.to_owned()),
        };
        let ttl_ms = match args.lease_ttl_ms {
            Some(ms) => ms,
            None => relay.lease_ttl_ms.unwrap_or(10_000),
        };
        let lease_ttl = Duration::from_millis(ttl_ms);
        let poll = match args.poll_ms.or(relay.poll_ms) {
            Some(ms) => Duration::from_millis(ms),
            None => (lease_ttl / 4).min(Duration::from_secs(1)),
        };
        let retention_s = match args.retention_s {
            Some(s) => s,
            None => relay.retention_s.unwrap_or(86_400),
        };
        // Flag, else the layers; a count past this machine's words is all of them.
        let bytes = |flag: Option<u64>, layered: Option<u64>, default: usize| {
            flag.or(layered)
                .map_or(default, |n| usize::try_from(n).unwrap_or(usize::MAX))
        };
        let batch_bytes = bytes(
            args.batch_bytes,
            relay.batch_bytes,
            ordo_postgres::DEFAULT_BATCH_BYTES,
        );
        let publish_call_bytes = bytes(args.publish_call_bytes, relay.publish_call_bytes, 8 << 20);
        let max_row_bytes = bytes(
            args.max_row_bytes,
            relay.max_row_bytes,
            ordo_postgres::DEFAULT_MAX_ROW_BYTES,
        );
        Ok(Self {
            database_url,
            redis_url,
            schema,
            lease_ttl,
            poll,
            retention: Duration::from_secs(retention_s),
            batch_bytes,
            publish_call_bytes,
            max_row_bytes,
            config,
        })
    }
}

/// `[redis] url` set by ORDO_REDIS_URL, else REDIS_URL, else the file's.
fn redis_url(config: &Config) -> anyhow::Result<SecretUrl> {
    let redis = RedisConfig::from_config(config).context("invalid domain configuration")?;
    let layered = redis.url().map(str::to_owned);
    let from_env = matches!(config.origin("redis.url"), Some(Origin::Env { .. }));
    let conventional = std::env::var("REDIS_URL").ok().filter(|url| !url.is_empty());
    match (layered, conventional) {
        (Some(url), _) if from_env => Ok(SecretUrl::new(url)),
        (_, Some(url)) => Ok(SecretUrl::new(url)),
        (Some(url), None) => Ok(SecretUrl::new(url)),
        (None, None) => anyhow::bail!(
            "no Redis: pass --redis-url URL, or set ORDO_REDIS_URL or REDIS_URL, or `[redis] url` in the \
             domain configuration (see --help)"
        ),
    }
}

/// `[relay]` of the domain configuration: the one declaration of the table
/// ordo-pg-relay owns, read after the layers (file, then the `ORDO_RELAY_*`
/// variables) with `Config::section`; its flags come first. ordo-core checks
/// the table's keys when it loads the file; a test holds them to these
/// fields (and refuses a value that is not a whole number of 0 or more,
/// naming its key and where it was set, before this struct is read).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RelayConfig {
    lease_ttl_ms: Option<u64>,
    poll_ms: Option<u64>,
    retention_s: Option<u64>,
    batch_bytes: Option<u64>,
    publish_call_bytes: Option<u64>,
    max_row_bytes: Option<u64>,
}

/// ordo-pg-relay's key of `[outbox]`, whose other keys are ordo-core's
/// (checked, with this one, when the file is loaded): the outbox's schema.
#[derive(Debug, Default, Deserialize)]
struct OutboxSchema {
    schema: Option<String>,
}

impl RelayConfig {
    /// The `[relay]` table of `config`, after its layers.
    fn from_config(config: &Config) -> Result<Self, ConfigError> {
        config.section("relay")
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let command = args.command.take();
    let settings = Settings::resolve(args)?;

    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(settings.database_url.expose())
        .await
        .with_context(|| format!("cannot connect to {}", settings.database_url))?;
    let outbox = PgOutbox::builder(pool)
        .schema(settings.schema)
        .config(&settings.config)
        .lease_ttl(settings.lease_ttl)
        .max_row_bytes(settings.max_row_bytes)
        .build()?;
    outbox.migrate().await?;
    if let Some(Command::Adopt) = command {
        return adopt(&outbox).await;
    }
    let broker = RedisBroker::builder(settings.redis_url.expose())
        .config(settings.config.clone())
        .publish_call_bytes(settings.publish_call_bytes)
        .build()
        .await?;
    let relay = PgRelay::new(outbox.clone(), Arc::new(broker), &settings.config)
        .poll_interval(settings.poll)
        .retention(settings.retention)
        .batch_bytes(settings.batch_bytes);

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
    use ordo_core::contract::config::{ENV_PREFIX, env_var_names, struct_fields};

    use super::*;

    /// The keys ordo-core accepts in `table` (listed when one is unknown).
    fn core_keys(table: &str) -> Vec<&'static str> {
        let error = Config::from_toml_str(&format!("[{table}]\nnot_a_key = 1\n")).unwrap_err();
        let ConfigError::UnknownKey { valid, .. } = error else {
            panic!("{error:?}")
        };
        valid
    }

    /// ordo-core checks `[relay]` when it loads the file; the keys it
    /// accepts and their `ORDO_RELAY_` variables are `RelayConfig`'s fields,
    /// in its order; `[outbox]` has the relay's `schema`.
    #[test]
    fn the_tables_core_checks_are_the_ones_the_relay_declares() {
        let fields = struct_fields::<RelayConfig>();
        assert_eq!(core_keys("relay"), fields);
        let prefix = format!("{ENV_PREFIX}RELAY_");
        let vars: Vec<String> = env_var_names()
            .into_iter()
            .filter(|name| name.starts_with(&prefix))
            .collect();
        let expected: Vec<String> = fields
            .iter()
            .map(|field| format!("{prefix}{}", field.to_ascii_uppercase()))
            .collect();
        assert_eq!(vars, expected);
        for field in struct_fields::<OutboxSchema>() {
            assert!(core_keys("outbox").contains(field), "{field}");
        }
    }

    #[test]
    fn the_relay_s_tables_are_read_after_the_layers() {
        let env = [("ORDO_RELAY_POLL_MS", "200"), ("ORDO_OUTBOX_SCHEMA", "shop")]
            .map(|(name, value)| (name.to_owned(), value.to_owned()));
        let config = Config::load_with_env(None, env).unwrap();
        let relay = RelayConfig::from_config(&config).unwrap();
        assert_eq!(relay.poll_ms, Some(200));
        assert_eq!(relay.lease_ttl_ms, None);
        let outbox: OutboxSchema = config.section("outbox").unwrap();
        assert_eq!(outbox.schema.as_deref(), Some("shop"));
        // A negative value is refused, naming where it was set.
        let env = [("ORDO_RELAY_RETENTION_S", "-1")].map(|(name, value)| (name.to_owned(), value.to_owned()));
        let error = Config::load_with_env(None, env).unwrap_err();
        assert_eq!(
            error.origin(),
            Some(&Origin::Env {
                var: "ORDO_RELAY_RETENTION_S".to_owned()
            }),
            "{error:?}"
        );
    }
}

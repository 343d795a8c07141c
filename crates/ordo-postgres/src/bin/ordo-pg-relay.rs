//! `ordo-pg-relay`: publishes a PostgreSQL outbox to Redis, as a process of
//! its own. Run as many as you like against one database.
//!
//! Environment:
//! - `DATABASE_URL` (required): `postgres://user@host:port/db`
//! - `REDIS_URL` (required): `redis://host:port`
//! - `ORDO_OUTBOX_SCHEMA`: the outbox schema (default `ordo`)
//! - `ORDO_RELAY_LEASE_TTL_MS`: slot lease TTL (default 10000)
//! - `ORDO_RELAY_POLL_MS`: fallback poll when no NOTIFY comes (default: the
//!   smaller of 1000 and a quarter of the TTL)
//! - `ORDO_RELAY_RETENTION_S`: how long published rows are kept (default 86400)
//!
//! Prints `relay ready <id>` once it runs; stops on SIGTERM or Ctrl-C,
//! releasing its slots.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ordo_core::config::Config;
use ordo_postgres::{PgOutbox, PgRelay};
use ordo_redis::RedisBroker;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

fn env_ms(name: &str) -> anyhow::Result<Option<u64>> {
    match std::env::var(name) {
        Ok(value) => {
            Ok(Some(value.parse().with_context(|| {
                format!("{name}={value:?} is not a whole number")
            })?))
        }
        Err(_) => Ok(None),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let database_url = std::env::var("DATABASE_URL").context("DATABASE_URL must be set")?;
    let redis_url = std::env::var("REDIS_URL").context("REDIS_URL must be set")?;
    let schema =
        std::env::var("ORDO_OUTBOX_SCHEMA").unwrap_or_else(|_| ordo_postgres::DEFAULT_SCHEMA.to_owned());
    let ttl = Duration::from_millis(env_ms("ORDO_RELAY_LEASE_TTL_MS")?.unwrap_or(10_000));
    let poll = env_ms("ORDO_RELAY_POLL_MS")?
        .map(Duration::from_millis)
        .unwrap_or_else(|| (ttl / 4).min(Duration::from_secs(1)));
    let retention = Duration::from_secs(env_ms("ORDO_RELAY_RETENTION_S")?.unwrap_or(86_400));

    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&database_url)
        .await
        .with_context(|| format!("cannot connect to {}", ordo_redis::redact_url(&database_url)))?;
    let outbox = PgOutbox::builder(pool).schema(schema).lease_ttl(ttl).build()?;
    outbox.migrate().await?;
    let config = Config::default();
    let broker = RedisBroker::builder(&redis_url)
        .config(config.clone())
        .build()
        .await?;
    let relay = PgRelay::new(outbox.clone(), Arc::new(broker), &config)
        .poll_interval(poll)
        .retention(retention);

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

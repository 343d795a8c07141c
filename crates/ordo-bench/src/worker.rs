//! `worker` (hidden): one Ordo engine instance in a process of its own, for
//! the benchmarks and checkers that kill, pause or stop instances.
//!
//! It runs the harness's worker ([`ordo_harness::worker::run`]: the `chaos`
//! category's [`Tick`](ordo_harness::tick::Tick) events on the Redis broker,
//! one machine-readable line per run on stdout) until SIGTERM or SIGINT,
//! then shuts down gracefully. Running it as a subcommand of `ordo-bench`
//! means a run needs no other binary: [`WorkerArgs::command`] spawns the
//! current executable.
//!
//! With `--database-url` it is a worker of `chaos --postgres` instead (see
//! [`crate::chaos`]): effects in PostgreSQL, and a relay in the process (or
//! only a relay, `--relay-only`).
//!
//! The timings default to Ordo's own defaults (`Config::default`), not the
//! harness's short test timings, so what a benchmark measures is what a
//! deployment gets; only the lease TTL is usually varied, and the heartbeat
//! follows it (TTL / 5) unless given.

use std::num::NonZeroU32;
use std::process::Command;

use anyhow::{Context as _, Result};
use ordo_harness::worker::WorkerOptions;

use crate::chaos::postgres::{self, PgTarget};
use crate::redis::TlsPaths;

/// How a worker child process gets its `--database-url`: by environment, off
/// the command line (`DATABASE_URL` itself is left to the parent run's own use).
pub const WORKER_DATABASE_URL_ENV: &str = "ORDO_BENCH_WORKER_DATABASE_URL";

/// Options of `ordo-bench worker`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct WorkerArgs {
    /// This instance's id, unique among live instances.
    #[arg(long)]
    pub instance: String,
    /// `server.partitioning.lease_ttl_ms`.
    #[arg(long, default_value_t = 15_000)]
    pub lease_ttl_ms: u64,
    /// The lease renewal interval in ms (default: the TTL / 5, as in `domain.toml`).
    #[arg(long)]
    pub heartbeat_ms: Option<u64>,
    /// `server.partitioning.poll_interval_seconds`, in ms.
    #[arg(long, default_value_t = 250)]
    pub poll_ms: u64,
    /// `server.partitioning.discovery_interval_seconds`, in ms.
    #[arg(long, default_value_t = 1_000)]
    pub discovery_ms: u64,
    /// `server.partitioning.reap_idle_ms`.
    #[arg(long, default_value_t = 3_600_000)]
    pub reap_idle_ms: u64,
    /// The PostgreSQL mode of `chaos`: the outbox and the effects in this
    /// database, and a relay in this process.
    #[arg(long, env = WORKER_DATABASE_URL_ENV, hide_env_values = true)]
    pub database_url: Option<ordo_redis::SecretUrl>,
    /// The outbox schema in `--database-url`.
    #[arg(long, default_value = "ordo", requires = "database_url")]
    pub pg_schema: String,
    /// Run the relay only, no engine (needs `--database-url`).
    #[arg(long, requires = "database_url")]
    pub relay_only: bool,
    /// `[categories.chaos] partitions`: that many hashed partitions
    /// (default: a partition per key).
    #[arg(long)]
    pub hashed_partitions: Option<NonZeroU32>,
    /// Commands (`chaos --commands`): run the harness's command handler and
    /// send commands for the shared keys `c0`..`c{N-1}` (0: none).
    #[arg(long, default_value_t = 0)]
    pub command_keys: usize,
    /// The handler's `ack_window`: messages a key's worker runs ahead of
    /// their acknowledgements (0: none).
    #[arg(long, default_value_t = 0)]
    pub ack_window: u32,
}

impl WorkerArgs {
    /// Default timings for instance `instance` with lease TTL `lease_ttl_ms`.
    pub fn new(instance: impl Into<String>, lease_ttl_ms: u64) -> Self {
        Self {
            instance: instance.into(),
            lease_ttl_ms,
            heartbeat_ms: None,
            poll_ms: 250,
            discovery_ms: 1_000,
            reap_idle_ms: 3_600_000,
            database_url: None,
            pg_schema: "ordo".to_owned(),
            relay_only: false,
            hashed_partitions: None,
            command_keys: 0,
            ack_window: 0,
        }
    }

    /// The harness's options for these arguments on `redis_url` with `tls`.
    pub fn options(&self, redis_url: &str, tls: &TlsPaths) -> WorkerOptions {
        let mut options = WorkerOptions::new(redis_url, &self.instance);
        options.tls = tls.files();
        options.lease_ttl_ms = self.lease_ttl_ms;
        options.heartbeat_ms = self.heartbeat_ms.unwrap_or(self.lease_ttl_ms / 5);
        options.poll_ms = self.poll_ms;
        options.discovery_ms = self.discovery_ms;
        options.reap_idle_ms = self.reap_idle_ms;
        options.hashed_partitions = self.hashed_partitions;
        options.command_keys = self.command_keys;
        options.ack_window = self.ack_window;
        options
    }

    /// The command that runs this worker as a child of the current process
    /// (`<current exe> worker ...`). The URLs go by environment (`REDIS_URL`,
    /// and the database's), never on the command line, where `ps` shows them;
    /// so do the TLS files.
    pub fn command(&self, redis_url: &str, tls: &TlsPaths) -> Result<Command> {
        let exe = std::env::current_exe().context("cannot locate the ordo-bench executable")?;
        let mut command = Command::new(exe);
        tls.pass_to(&mut command);
        command
            .env("REDIS_URL", redis_url)
            .env_remove(WORKER_DATABASE_URL_ENV)
            .args(["worker", "--instance", &self.instance])
            .args(["--lease-ttl-ms", &self.lease_ttl_ms.to_string()])
            .args(["--poll-ms", &self.poll_ms.to_string()])
            .args(["--discovery-ms", &self.discovery_ms.to_string()])
            .args(["--reap-idle-ms", &self.reap_idle_ms.to_string()]);
        if let Some(heartbeat_ms) = self.heartbeat_ms {
            command.args(["--heartbeat-ms", &heartbeat_ms.to_string()]);
        }
        if let Some(partitions) = self.hashed_partitions {
            command.args(["--hashed-partitions", &partitions.to_string()]);
        }
        if self.command_keys > 0 {
            command.args(["--command-keys", &self.command_keys.to_string()]);
        }
        if self.ack_window > 0 {
            command.args(["--ack-window", &self.ack_window.to_string()]);
        }
        if let Some(url) = &self.database_url {
            command
                .env(WORKER_DATABASE_URL_ENV, url.expose())
                .args(["--pg-schema", &self.pg_schema]);
            if self.relay_only {
                command.arg("--relay-only");
            }
        }
        Ok(command)
    }
}

/// Runs the worker on `redis_url` (with `tls`) until SIGTERM or SIGINT.
pub async fn run(args: &WorkerArgs, redis_url: &str, tls: &TlsPaths) -> Result<()> {
    let options = args.options(redis_url, tls);
    let shutdown = ordo_harness::worker::shutdown_on_signal()?;
    match &args.database_url {
        Some(url) => {
            let target = PgTarget {
                url: url.clone(),
                schema: args.pg_schema.clone(),
            };
            postgres::run_worker(&options, &target, args.relay_only, shutdown).await
        }
        None => ordo_harness::worker::run(&options, shutdown)
            .await
            .map_err(Into::into),
    }
    .with_context(|| format!("worker `{}` failed", options.instance))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heartbeat_follows_the_ttl_unless_given() {
        let mut args = WorkerArgs::new("w1", 2_000);
        let options = args.options("redis://127.0.0.1:1", &TlsPaths::default());
        assert_eq!((options.lease_ttl_ms, options.heartbeat_ms), (2_000, 400));
        assert_eq!((options.poll_ms, options.discovery_ms), (250, 1_000));
        options.config().unwrap();
        args.heartbeat_ms = Some(300);
        assert_eq!(
            args.options("redis://127.0.0.1:1", &TlsPaths::default())
                .heartbeat_ms,
            300
        );
    }
}

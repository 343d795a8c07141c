//! The Redis a run measures against, and fred clients for it.
//!
//! `--redis-url` (or `REDIS_URL`) names an existing server; without it the
//! run starts a private `redis-server` with ordo-testkit on a free port and
//! keeps it until the run ends, so figures never depend on what else a shared
//! server is doing.

use std::time::Duration;

use anyhow::{Context as _, Result};
use fred::clients::{Client, Pool};
use fred::prelude::{Builder, ClientLike as _};
use fred::types::config::Config;
use ordo_testkit::{Redis, RedisBuilder};

/// How long a client may take to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one command may take before the run fails; generous, because a
/// pipeline of thousands of XADDs is one "command" here.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the Redis comes from; flattened into the command line.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RedisArgs {
    /// Redis to run against (redis://host:port[/db]). Without it, a private
    /// redis-server is started for the run and stopped at its end.
    #[arg(long, env = "REDIS_URL", global = true, value_name = "URL")]
    pub redis_url: Option<String>,
}

impl RedisArgs {
    /// The Redis named on the command line, or a fresh private one.
    pub async fn start(&self) -> Result<BenchRedis> {
        self.start_with(Redis::builder()).await
    }

    /// Like [`RedisArgs::start`], but a private server is started with
    /// `builder`'s options (e.g. `append_only(true)` for a run that restarts
    /// Redis). The options do not apply to a server named by URL.
    pub async fn start_with(&self, builder: RedisBuilder) -> Result<BenchRedis> {
        if let Some(url) = self
            .redis_url
            .as_deref()
            .map(str::trim)
            .filter(|url| !url.is_empty())
        {
            return Ok(BenchRedis {
                url: url.to_owned(),
                server: None,
            });
        }
        // Starting a server blocks until it answers PING.
        let server = tokio::task::spawn_blocking(move || builder.start())
            .await
            .context("the task starting redis-server panicked")?
            .context("could not start a private redis-server (or pass --redis-url / set REDIS_URL)")?;
        Ok(BenchRedis {
            url: server.url(),
            server: Some(server),
        })
    }
}

/// The Redis of a run. A private server lives as long as this value.
#[derive(Debug)]
pub struct BenchRedis {
    url: String,
    server: Option<Redis>,
}

impl BenchRedis {
    /// The URL to hand to clients (and to child processes).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The private server, to kill, pause or restart it; `None` when the run
    /// uses a server named by URL, which it cannot control.
    pub fn server_mut(&mut self) -> Option<&mut Redis> {
        self.server.as_mut()
    }

    /// A connected client with its own connection.
    pub async fn client(&self) -> Result<Client> {
        connect(&self.url).await
    }

    /// A connected pool of `size` connections.
    pub async fn pool(&self, size: usize) -> Result<Pool> {
        connect_pool(&self.url, size).await
    }
}

/// A fred builder for `url` with the benchmark's timeouts and no reconnects:
/// a benchmark whose Redis goes away should fail, not wait.
pub fn builder(url: &str) -> Result<Builder> {
    let mut config = Config::from_url(url).with_context(|| format!("{url:?} is not a usable Redis URL"))?;
    config.fail_fast = true;
    let mut builder = Builder::from_config(config);
    builder
        .with_connection_config(|connection| connection.connection_timeout = CONNECT_TIMEOUT)
        .with_performance_config(|performance| performance.default_command_timeout = COMMAND_TIMEOUT);
    Ok(builder)
}

/// A client connected to `url` (waits until the connection is up).
pub async fn connect(url: &str) -> Result<Client> {
    let client = builder(url)?.build()?;
    client
        .init()
        .await
        .with_context(|| format!("could not connect to Redis at {url}"))?;
    Ok(client)
}

/// A pool of `size` connections to `url` (waits until all are up).
pub async fn connect_pool(url: &str, size: usize) -> Result<Pool> {
    let pool = builder(url)?.build_pool(size)?;
    pool.init()
        .await
        .with_context(|| format!("could not connect to Redis at {url}"))?;
    Ok(pool)
}

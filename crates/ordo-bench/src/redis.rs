//! The Redis a run measures against, and fred clients for it.
//!
//! `--redis-url` (or `REDIS_URL`) names an existing server, or a Redis Cluster
//! (`redis-cluster://host:port,host:port,...`); without it the run starts a
//! private `redis-server` with ordo-testkit on a free port (with `--cluster`,
//! a private local Redis Cluster of three primaries) and keeps it until the
//! run ends, so figures never depend on what else a shared server is doing.
//!
//! TLS: a `rediss://` URL with `--tls-ca-file` (and `--tls-cert-file`,
//! `--tls-key-file` for mutual TLS), the same flags as the `ordo` tool; or
//! `--tls`, which makes the private server a TLS one with a CA made for the
//! run. Every client of the run, its engines and its worker processes use them.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result};
use fred::clients::{Client, Pool};
use fred::prelude::{Builder, ClientLike as _};
use ordo_redis::TlsFiles;
use ordo_testkit::{Redis, RedisBuilder, RedisCluster, RedisClusterBuilder, TestCa};

/// How long a client may take to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one command may take before the run fails; generous, because a
/// pipeline of thousands of XADDs is one "command" here.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the Redis comes from; flattened into the command line.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RedisArgs {
    /// Redis to run against (redis://host:port[/db], or a Redis Cluster:
    /// redis-cluster://host:port[,host:port...]). Without it, a private
    /// redis-server is started for the run and stopped at its end.
    #[arg(
        long,
        env = "REDIS_URL",
        hide_env_values = true,
        global = true,
        value_name = "URL"
    )]
    pub redis_url: Option<ordo_redis::SecretUrl>,
    /// Without --redis-url: start a private local Redis Cluster (three
    /// primaries, redis-server --cluster-enabled yes) instead of one server.
    #[arg(long, global = true, conflicts_with = "redis_url")]
    pub cluster: bool,
    /// Without --redis-url: the private redis-server speaks TLS only (a CA
    /// and server certificate made for the run; clients trust that CA).
    #[arg(long, global = true, conflicts_with_all = ["redis_url", "cluster"])]
    pub tls: bool,
    /// The TLS files of a rediss:// --redis-url (same flags as `ordo`).
    #[command(flatten)]
    pub tls_files: TlsPaths,
}

/// The TLS files of a `rediss://` URL, as paths: they travel to worker
/// processes by environment ([`TlsPaths::pass_to`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct TlsPaths {
    /// rediss:// only: the CA certificates (PEM) to trust instead of the system's.
    #[arg(long, env = TLS_CA_ENV, global = true, value_name = "PATH")]
    pub tls_ca_file: Option<PathBuf>,
    /// rediss:// only: the client certificate (PEM) of mutual TLS, with --tls-key-file.
    #[arg(long, env = TLS_CERT_ENV, global = true, value_name = "PATH")]
    pub tls_cert_file: Option<PathBuf>,
    /// rediss:// only: the client certificate's private key (PEM).
    #[arg(long, env = TLS_KEY_ENV, global = true, value_name = "PATH")]
    pub tls_key_file: Option<PathBuf>,
}

const TLS_CA_ENV: &str = "ORDO_BENCH_TLS_CA_FILE";
const TLS_CERT_ENV: &str = "ORDO_BENCH_TLS_CERT_FILE";
const TLS_KEY_ENV: &str = "ORDO_BENCH_TLS_KEY_FILE";

impl TlsPaths {
    /// The files for ordo-redis (`RedisBrokerBuilder::tls`, `client_config_with_tls`).
    pub fn files(&self) -> TlsFiles {
        TlsFiles::new().with_files(
            self.tls_ca_file.clone(),
            self.tls_cert_file.clone(),
            self.tls_key_file.clone(),
        )
    }

    /// Sets (or clears) the environment through which a child `ordo-bench`
    /// process (a worker) reads these files.
    pub fn pass_to(&self, command: &mut Command) {
        for (name, path) in [
            (TLS_CA_ENV, &self.tls_ca_file),
            (TLS_CERT_ENV, &self.tls_cert_file),
            (TLS_KEY_ENV, &self.tls_key_file),
        ] {
            match path {
                Some(path) => command.env(name, path),
                None => command.env_remove(name),
            };
        }
    }
}

impl RedisArgs {
    /// The Redis named on the command line, or a fresh private one.
    pub async fn start(&self) -> Result<BenchRedis> {
        self.start_with(Redis::builder(), RedisCluster::builder()).await
    }

    /// Like [`RedisArgs::start`], but a private server is started with
    /// `builder`'s options, a private cluster (`--cluster`) with `cluster`'s
    /// (e.g. `append_only(true)` for a run that restarts Redis). The options
    /// do not apply to a Redis named by URL.
    pub async fn start_with(
        &self,
        builder: RedisBuilder,
        cluster: RedisClusterBuilder,
    ) -> Result<BenchRedis> {
        if let Some(url) = self
            .redis_url
            .as_ref()
            .map(|url| url.expose().trim())
            .filter(|url| !url.is_empty())
        {
            ordo_redis::client_config_with_tls(url, &self.tls_files.files())
                .context("invalid --redis-url / REDIS_URL (or its --tls-* files)")?;
            return Ok(BenchRedis {
                url: url.into(),
                tls: self.tls_files.clone(),
                private: Private::None,
                _ca: None,
            });
        }
        if self.tls {
            return start_tls(builder).await;
        }
        // Starting servers blocks until they answer.
        if self.cluster {
            let cluster = tokio::task::spawn_blocking(move || cluster.start())
                .await
                .context("the task starting the Redis Cluster panicked")?
                .context("could not start a private Redis Cluster (or pass --redis-url / set REDIS_URL)")?;
            return Ok(BenchRedis {
                url: cluster.url().into(),
                tls: TlsPaths::default(),
                private: Private::Cluster(cluster),
                _ca: None,
            });
        }
        let server = tokio::task::spawn_blocking(move || builder.start())
            .await
            .context("the task starting redis-server panicked")?
            .context("could not start a private redis-server (or pass --redis-url / set REDIS_URL)")?;
        Ok(BenchRedis {
            url: server.url().into(),
            tls: TlsPaths::default(),
            private: Private::Server(server),
            _ca: None,
        })
    }
}

/// A private server with TLS (`--tls`): a CA made for the run signs its
/// certificate, and the run's clients trust that CA (no client certificate).
async fn start_tls(builder: RedisBuilder) -> Result<BenchRedis> {
    let dir = tempfile::Builder::new()
        .prefix("ordo-bench-tls-")
        .tempdir()
        .context("could not create a directory for the TLS certificates")?;
    let ca = TestCa::new(dir.path(), "ordo-bench-ca").context("could not make a test CA")?;
    let server_tls = ca
        .redis_tls(false)
        .context("could not make the server certificate")?;
    let server = tokio::task::spawn_blocking(move || builder.tls(server_tls).start())
        .await
        .context("the task starting redis-server panicked")?
        .context("could not start a private redis-server with TLS")?;
    let url = server
        .tls_url()
        .context("the private redis-server has no TLS port")?;
    Ok(BenchRedis {
        url: url.into(),
        tls: TlsPaths {
            tls_ca_file: Some(ca.file().to_owned()),
            ..TlsPaths::default()
        },
        private: Private::Server(server),
        _ca: Some(dir),
    })
}

/// The Redis of a run. A private server or cluster lives as long as this value.
#[derive(Debug)]
pub struct BenchRedis {
    url: ordo_redis::SecretUrl,
    tls: TlsPaths,
    private: Private,
    /// The certificates of `--tls`, removed at the end of the run.
    _ca: Option<tempfile::TempDir>,
}

/// What the run started itself.
#[derive(Debug)]
enum Private {
    /// Nothing: the Redis is named by URL.
    None,
    Server(Redis),
    Cluster(RedisCluster),
}

impl BenchRedis {
    /// The URL to hand to clients (and to child processes).
    pub fn url(&self) -> &str {
        self.url.expose()
    }

    /// The TLS files every client of the run (and its workers) uses.
    pub fn tls(&self) -> &TlsPaths {
        &self.tls
    }

    /// The private server, to kill, pause or restart it; `None` when the run
    /// uses a Redis named by URL, which it cannot control, or a private cluster.
    pub fn server_mut(&mut self) -> Option<&mut Redis> {
        match &mut self.private {
            Private::Server(server) => Some(server),
            Private::None | Private::Cluster(_) => None,
        }
    }

    /// The private cluster (`--cluster`), to kill, restart or fail over its
    /// nodes; `None` otherwise.
    pub fn cluster_mut(&mut self) -> Option<&mut RedisCluster> {
        match &mut self.private {
            Private::Cluster(cluster) => Some(cluster),
            Private::None | Private::Server(_) => None,
        }
    }

    /// Whether the run's Redis is a Redis Cluster (private or named by URL).
    pub fn is_cluster(&self) -> bool {
        ordo_redis::client_config(self.url.expose()).is_ok_and(|config| config.server.is_clustered())
    }

    /// A connected client with its own connection.
    pub async fn client(&self) -> Result<Client> {
        connect(self.url.expose(), &self.tls).await
    }

    /// A connected pool of `size` connections.
    pub async fn pool(&self, size: usize) -> Result<Pool> {
        connect_pool(self.url.expose(), &self.tls, size).await
    }
}

/// A fred builder for `url` (with `tls` for a `rediss://` URL) with the
/// benchmark's timeouts and no reconnects: a benchmark whose Redis goes away
/// should fail, not wait.
pub fn builder(url: &str, tls: &TlsPaths) -> Result<Builder> {
    let mut config = ordo_redis::client_config_with_tls(url, &tls.files())?;
    config.fail_fast = true;
    let mut builder = Builder::from_config(config);
    builder
        .with_connection_config(|connection| connection.connection_timeout = CONNECT_TIMEOUT)
        .with_performance_config(|performance| performance.default_command_timeout = COMMAND_TIMEOUT);
    Ok(builder)
}

/// A client connected to `url` (waits until the connection is up).
pub async fn connect(url: &str, tls: &TlsPaths) -> Result<Client> {
    let client = builder(url, tls)?.build()?;
    client
        .init()
        .await
        .with_context(|| format!("could not connect to Redis at {}", ordo_redis::redact_url(url)))?;
    Ok(client)
}

/// A pool of `size` connections to `url` (waits until all are up).
pub async fn connect_pool(url: &str, tls: &TlsPaths, size: usize) -> Result<Pool> {
    let pool = builder(url, tls)?.build_pool(size)?;
    pool.init()
        .await
        .with_context(|| format!("could not connect to Redis at {}", ordo_redis::redact_url(url)))?;
    Ok(pool)
}

//! The Redis broker's own keys of `[server.partitioning]`: lease,
//! heartbeat, reap and discovery timings.
//!
//! ```toml
//! [server.partitioning]
//! lease_ttl_ms = 15000                # ownership lease lifetime
//! heartbeat_interval_seconds = 3.0    # default lease_ttl_ms / 5000; at most a third of the TTL
//! reap_idle_ms = 3600000              # idle time before a drained partition is retired; 0: never
//! discovery_interval_seconds = 1.0    # how often the partition index is re-read; under the TTL
//! max_owned_partitions = 0            # most partitions one instance owns (all groups); 0: no limit
//! recheck_interval_seconds = 5.0      # how often idle partitions are re-checked for missed wake-ups
//! ```
//!
//! They share the table with ordo-core's keys (`poll_interval_seconds`,
//! `max_retries`, the retry backoff, `max_concurrency`), which the broker
//! reads from `Config::partitioning()`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ordo_core::ConfigError;
use ordo_core::contract::config::{Config, positive_int, positive_seconds, struct_fields};
use serde::Deserialize;

const LEASE_TTL_MS: u64 = 15_000;
const REAP_IDLE_MS: u64 = 3_600_000;
const DISCOVERY_INTERVAL_SECONDS: f64 = 1.0;
const RECHECK_INTERVAL_SECONDS: f64 = 5.0;

const LEASE_TTL_KEY: &str = "server.partitioning.lease_ttl_ms";
const HEARTBEAT_KEY: &str = "server.partitioning.heartbeat_interval_seconds";
const REAP_IDLE_KEY: &str = "server.partitioning.reap_idle_ms";
const DISCOVERY_KEY: &str = "server.partitioning.discovery_interval_seconds";
const MAX_OWNED_KEY: &str = "server.partitioning.max_owned_partitions";
const RECHECK_KEY: &str = "server.partitioning.recheck_interval_seconds";

/// The Redis broker's keys of `[server.partitioning]`, as the file writes
/// them: the one declaration of the keys (ordo-core hands the section
/// over, [`Config::broker_section`]). Integers are read signed so that a
/// negative value gets a message naming its key rather than a type error.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    lease_ttl_ms: Option<i64>,
    heartbeat_interval_seconds: Option<f64>,
    reap_idle_ms: Option<i64>,
    discovery_interval_seconds: Option<f64>,
    max_owned_partitions: Option<i64>,
    recheck_interval_seconds: Option<f64>,
}

/// The Redis broker's timings, from `[server.partitioning]` of the domain
/// configuration ([`RedisSettings::from_config`]). Every cross-field rule
/// between them is checked there, once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisSettings {
    lease_ttl: Duration,
    heartbeat_interval: Duration,
    reap: ReapPolicy,
    discovery_interval: Duration,
    max_owned_partitions: Option<std::num::NonZeroUsize>,
    recheck_interval: Duration,
}

/// When a drained, idle partition is retired (`reap_idle_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReapPolicy {
    /// `reap_idle_ms = 0`: partitions are never retired; their index entries
    /// and empty streams stay until an operator removes them (what users of
    /// the source framework set for a small, fixed set of keys).
    Never,
    /// Retired once drained and idle this long.
    After(Duration),
}

impl ReapPolicy {
    /// The idle time after which a partition is retired; `None` for never.
    pub fn idle(self) -> Option<Duration> {
        match self {
            Self::Never => None,
            Self::After(idle) => Some(idle),
        }
    }
}

impl Default for RedisSettings {
    fn default() -> Self {
        Self::from_config(&Config::default()).expect("the built-in defaults are valid")
    }
}

impl RedisSettings {
    /// The keys of `[server.partitioning]` the Redis broker reads beyond
    /// ordo-core's (`Broker::partitioning_keys` of [`RedisBroker`](crate::RedisBroker)):
    /// the fields of the section it declares.
    pub fn keys() -> &'static [&'static str] {
        struct_fields::<Section>()
    }

    /// Reads and validates the Redis broker's keys of `config`'s
    /// `[server.partitioning]`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::UnknownKey`] for a key of the table that neither
    /// ordo-core nor this broker reads; [`ConfigError::WrongType`] for a
    /// value of the wrong type; [`ConfigError::Invalid`] naming the key for
    /// a value out of range, a heartbeat over a third of the lease TTL, or
    /// a discovery interval not under it.
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        // An error names where its key was set (a file's line, a variable).
        Self::read(config).map_err(|error| config.locate(error))
    }

    fn read(config: &Config) -> Result<Self, ConfigError> {
        let section: Section = config.broker_section()?;
        let lease_ttl =
            Duration::from_millis(positive_int(LEASE_TTL_KEY, section.lease_ttl_ms, LEASE_TTL_MS)?);
        let heartbeat_interval = heartbeat_interval(section.heartbeat_interval_seconds, lease_ttl)?;
        let reap = reap_policy(section.reap_idle_ms)?;
        let discovery_interval = positive_seconds(
            DISCOVERY_KEY,
            section.discovery_interval_seconds,
            DISCOVERY_INTERVAL_SECONDS,
        )?;
        if discovery_interval >= lease_ttl {
            return Err(ConfigError::Invalid {
                key: DISCOVERY_KEY,
                reason: format!(
                    "must be under the lease TTL ({LEASE_TTL_KEY} = {} ms): an instance announces itself \
                     once per discovery interval and its announcement lives one TTL, got {} s",
                    lease_ttl.as_millis(),
                    discovery_interval.as_secs_f64(),
                ),
            });
        }
        let max_owned_partitions = match section.max_owned_partitions {
            None | Some(0) => None,
            Some(n) => Some(
                usize::try_from(n)
                    .ok()
                    .and_then(std::num::NonZeroUsize::new)
                    .ok_or_else(|| ConfigError::Invalid {
                        key: MAX_OWNED_KEY,
                        reason: format!("must be 0 (no limit) or a number of partitions, got {n}"),
                    })?,
            ),
        };
        let recheck_interval = positive_seconds(
            RECHECK_KEY,
            section.recheck_interval_seconds,
            RECHECK_INTERVAL_SECONDS,
        )?;
        Ok(Self {
            lease_ttl,
            heartbeat_interval,
            reap,
            discovery_interval,
            max_owned_partitions,
            recheck_interval,
        })
    }

    /// `lease_ttl_ms`: how long an ownership lease lives without renewal.
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// `heartbeat_interval_seconds`: how often held leases are renewed.
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat_interval
    }

    /// `reap_idle_ms` as a policy: [`ReapPolicy::Never`] for `0`.
    pub fn reap_policy(&self) -> ReapPolicy {
        self.reap
    }

    /// `reap_idle_ms`: how long a drained partition idles before retirement;
    /// `None` when `reap_idle_ms = 0` (never retired).
    pub fn reap_idle(&self) -> Option<Duration> {
        self.reap.idle()
    }

    /// `discovery_interval_seconds`: how often the partition index is re-read.
    pub fn discovery_interval(&self) -> Duration {
        self.discovery_interval
    }

    /// `max_owned_partitions`: the most partitions (units: a key's
    /// partition, a hashed partition, a process manager's correlation
    /// value) one instance owns at once, over all its consumer groups;
    /// `None` (`0`, the default) for no limit. Each owned partition costs
    /// the instance memory (docs/PERFORMANCE.md); the partitions over the
    /// limit are left to other instances, or wait until this one has room.
    pub fn max_owned_partitions(&self) -> Option<std::num::NonZeroUsize> {
        self.max_owned_partitions
    }

    /// `recheck_interval_seconds`: how often the waker re-checks every
    /// idle partition its workers wait on (one script call per Redis node,
    /// whatever the number of partitions), and its doorbell subscriptions
    /// against the cluster's slot map: the most time a wake-up that was
    /// missed (a subscription Redis dropped in a failover or a slot move)
    /// or never rung (an entry added without Ordo's publish script, by hand
    /// or by a replay tool) takes to be noticed.
    pub fn recheck_interval(&self) -> Duration {
        self.recheck_interval
    }
}

/// The heartbeat: by default a fifth of the TTL; at most a third of it, so
/// a live owner gets at least two more renewals in before its lease could
/// lapse.
fn heartbeat_interval(seconds: Option<f64>, lease_ttl: Duration) -> Result<Duration, ConfigError> {
    let Some(seconds) = seconds else {
        return Ok(lease_ttl / 5);
    };
    let heartbeat = positive_seconds(HEARTBEAT_KEY, Some(seconds), 0.0)?;
    if heartbeat.saturating_mul(3) > lease_ttl {
        return Err(ConfigError::Invalid {
            key: HEARTBEAT_KEY,
            reason: format!(
                "must be well under the lease TTL (at most a third of {LEASE_TTL_KEY} = {} ms, i.e. {} s) \
                 so a live owner never lets its lease lapse, got {seconds}",
                lease_ttl.as_millis(),
                lease_ttl.as_secs_f64() / 3.0,
            ),
        });
    }
    Ok(heartbeat)
}

/// `reap_idle_ms`: `0` is "never reap", as the source framework's users set
/// it; a negative value is an error naming the key.
fn reap_policy(value: Option<i64>) -> Result<ReapPolicy, ConfigError> {
    match value {
        Some(0) => Ok(ReapPolicy::Never),
        Some(v) if v < 0 => Err(ConfigError::Invalid {
            key: REAP_IDLE_KEY,
            reason: format!("must be 0 (never reap) or a number of milliseconds, got {v}"),
        }),
        other => Ok(ReapPolicy::After(Duration::from_millis(positive_int(
            REAP_IDLE_KEY,
            other,
            REAP_IDLE_MS,
        )?))),
    }
}

/// `[redis]` of the domain configuration: where Redis is, for the programs
/// that find it in the file (the `ordo` tool, `ordo-pg-relay`; an
/// application passes its URL to [`RedisBroker::builder`](crate::RedisBroker::builder)).
///
/// ```toml
/// [redis]
/// url = "redis://127.0.0.1:6379/0"   # or "redis-cluster://10.0.0.1:7000,10.0.0.2:7000"
/// # rediss:// only: the CA to trust (default: the system's), and a client
/// # certificate for mutual TLS; paths relative to the file.
/// tls_ca_file = "redis-ca.pem"
/// tls_cert_file = "ordo-client.pem"
/// tls_key_file = "ordo-client.key"
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    url: Option<String>,
    tls_ca_file: Option<PathBuf>,
    tls_cert_file: Option<PathBuf>,
    tls_key_file: Option<PathBuf>,
}

impl RedisConfig {
    /// The `[redis]` table of `config`, after its layers (file, then the
    /// `ORDO_REDIS_*` variables).
    ///
    /// # Errors
    ///
    /// [`ConfigError::WrongType`] naming the key and where it was set.
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        config.section("redis")
    }

    /// The keys of `[redis]`.
    pub fn keys() -> &'static [&'static str] {
        struct_fields::<Self>()
    }

    /// `url`: the Redis URL (it may hold a password: wrap it in a
    /// [`SecretUrl`](crate::SecretUrl) before showing it).
    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// `tls_ca_file`, as written (relative to the file when set there).
    pub fn tls_ca_file(&self) -> Option<&Path> {
        self.tls_ca_file.as_deref()
    }

    /// `tls_cert_file`, as written.
    pub fn tls_cert_file(&self) -> Option<&Path> {
        self.tls_cert_file.as_deref()
    }

    /// `tls_key_file`, as written.
    pub fn tls_key_file(&self) -> Option<&Path> {
        self.tls_key_file.as_deref()
    }
}

//! The domain configuration, read from the `[server.partitioning]` and
//! `[server.priority_lanes]` tables of `domain.toml`.
//!
//! ```toml
//! [server.partitioning]
//! poll_interval_seconds = 0.25        # idle wait of pollers (outbox processor, partition workers)
//! max_retries = 3                     # retries after a handler's first failed attempt
//! retry_backoff_initial_ms = 100      # first retry delay (doubles, jittered)
//! retry_backoff_max_ms = 5000         # retry delay cap
//! max_concurrency = 64                # handler runs at once in process
//! handler_timeout_ms = 300000         # an attempt running longer is cancelled (a failed attempt); 0: no limit
//! timeout_is_transient = false        # a timed-out attempt is transient (not counted) rather than failed
//! max_transient_ms = 3600000          # transient failures of one message for longer than this halt it; 0: never
//! pause_min_keys = 3                  # pause a handler when this many keys fail transiently (mostly); 0: never
//!
//! [server.priority_lanes]
//! enabled = false                     # route `raise_backfill` events to the backfill lane
//! backfill_suffix = "backfill"        # the lane's stream suffix (reserved as a key value)
//! threshold = 0                       # units of work with a priority below it go to the backfill lane
//!
//! [handlers.OrderProjector]           # one handler's own settings (its registered name)
//! max_retries = 5                     # overrides server.partitioning.max_retries
//! retry_backoff_initial_ms = 200      # overrides the retry backoff
//! retry_backoff_max_ms = 10000
//! max_concurrency = 4                 # at most this many runs of this handler at once
//! timeout_ms = 60000                  # overrides server.partitioning.handler_timeout_ms
//! timeout_is_transient = true         # overrides the other keys of the same name
//! max_transient_ms = 0
//! pause_min_keys = 10
//! ack_window = 0                      # per-key partitions: run up to N messages ahead of their
//!                                     # acknowledgements (a failover runs at most N again)
//!
//! [categories.order]                 # one stream category's own settings
//! partitions = "per_key"              # one partition per key (the default), or a number N:
//!                                     # N hashed partitions, each key in hash(key) mod N
//!
//! [health]
//! max_lag = 10000                     # more undelivered entries than this: `lagging`
//! max_pending_age_ms = 300000         # an entry in flight longer than this: `lagging`
//! ```
//!
//! # Retries: what `max_retries = N` means
//!
//! This is the one definition, for every broker (inline and Redis, keyed
//! and plain handlers): a message is **attempted at most `N + 1` times**,
//! the first attempt plus `N` retries, with the retry backoff between
//! attempts. `max_retries = 0` is one attempt and no retry. After the last
//! failed attempt a keyed (`sequential_by`) handler halts its key and any
//! other handler dead-letters the message. `HandlerContext::attempt()`
//! counts from 1 to `N + 1`. A `[handlers.NAME]` table overrides it for one
//! handler, with the same meaning.
//!
//! A **transient** failure (the error is marked
//! [`Transient`](crate::contract::retry::Transient), or is a lost connection: see
//! [`crate::contract::retry`]) is not one of those attempts: it is retried with the
//! same backoff, the key waiting in order, until the message succeeds or
//! fails otherwise; only transient failures lasting `max_transient_ms`
//! give up on it. `HandlerContext::attempt()` does not grow with them.
//!
//! # Timeouts
//!
//! An attempt running longer than `handler_timeout_ms` (`timeout_ms` of
//! `[handlers.NAME]`) is cancelled and counts as a failed attempt (as a
//! transient one with `timeout_is_transient = true`). The cancellation
//! takes effect at the handler's next `.await`: a handler in blocking code
//! runs on until it returns, and its key waits for it (on Redis, its lease
//! is kept meanwhile). A handler that blocks before it first waits for
//! anything runs on its worker's task (see
//! [`Attempt::run`](crate::contract::attempt::Attempt::run)), which it holds
//! until it returns.
//!
//! # Keys a broker reads
//!
//! A broker may read keys of its own from `[server.partitioning]` (the
//! Redis broker's timings, documented on `ordo_redis::RedisSettings`). This crate keeps them unread in the
//! [`Config`]; the broker declares them in a serde struct of its own
//! ([`Broker::partitioning_keys`] are its fields) and reads them into it with
//! [`Config::broker_section`], checking ranges with the validators this
//! crate uses ([`positive_int`], [`positive_seconds`]). A key of
//! `[server.partitioning]` that neither this crate nor the domain's broker
//! reads is an error: at [`Config::broker_partitioning`] (which the Redis
//! broker's builder calls) and at `DomainBuilder::init()`
//! ([`UsageProblem::UnknownConfigKey`]), naming the key and listing the valid
//! ones. The inline broker reads none.
//!
//! Every key is optional. The file may also hold the `[redis]` table (`url`,
//! `tls_ca_file`, `tls_cert_file`, `tls_key_file`)
//! and the `[cli]` table (`warn_partitions`) that the `ordo` operator tool
//! reads. Any other key, at any level, is an error naming the key and
//! listing the valid keys at its level, so a typo (`[server.partioning]`, a
//! top-level `max_retries`) is never silently dropped.
//!
//! [`Broker::partitioning_keys`]: crate::contract::broker::Broker::partitioning_keys
//! [`UsageProblem::UnknownConfigKey`]: crate::UsageProblem::UnknownConfigKey

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use crate::contract::backoff::Backoff;

mod error;
mod file;
mod layers;
mod schema;
mod section;

use crate::contract::key::{DEFAULT_BACKFILL_SUFFIX, KeyRules, MAX_HASHED_PARTITIONS, segment_rule};
pub use error::{ConfigError, Origin, TomlError};
use file::{
    RawCategory, RawCommands, RawFile, RawHandler, RawHealth, RawOutbox, RawPartitioning, RawPriorityLanes,
};
pub use layers::{CONFIG_FILE_ENV, ENV_PREFIX, env_var_names};
pub use schema::PARTITIONING_KEYS;
use schema::{SCHEMA, check_keys, with_article};
pub use section::{positive_int, positive_seconds, struct_fields};

const POLL_INTERVAL_SECONDS: f64 = 0.25;
const MAX_RETRIES: u32 = 3;
const RETRY_BACKOFF_INITIAL_MS: u64 = 100;
const RETRY_BACKOFF_MAX_MS: u64 = 5_000;
const MAX_CONCURRENCY: u64 = 64;
const HANDLER_TIMEOUT_MS: u64 = 300_000;
const MAX_TRANSIENT_MS: u64 = 3_600_000;
const PAUSE_MIN_KEYS: u32 = 3;
const PRIORITY_THRESHOLD: i32 = 0;
const HEALTH_MAX_LAG: u64 = 10_000;
const HEALTH_MAX_PENDING_AGE_MS: u64 = 300_000;
/// 4 MiB: far above any sensible event, far below what hurts a Redis node.
const MAX_PAYLOAD_BYTES: u64 = 4 * 1024 * 1024;
const COMMANDS_TIMEOUT_MS: u64 = 10_000;
const COMMANDS_DEDUP_WINDOW_MS: u64 = 600_000;

/// The validated domain configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    partitioning: PartitioningConfig,
    /// The keys of `[server.partitioning]` this crate does not read, left
    /// to the broker (see [`Config::broker_partitioning`]).
    broker_partitioning: toml::Table,
    priority_lanes: PriorityLanesConfig,
    handlers: BTreeMap<String, HandlerConfig>,
    health: HealthConfig,
    outbox: OutboxConfig,
    commands: CommandsConfig,
    categories: BTreeMap<String, Partitions>,
    /// The tables other crates read (`[redis]`, `[cli]`, `[relay]`, and
    /// `[outbox]` for its `schema`), after the layers were merged.
    tables: toml::Table,
    /// Where each setting came from (never makes two configurations differ).
    origins: layers::Origins,
}

/// How a partitioned category's keys map to partitions: `partitions` in
/// `[categories.NAME]`.
///
/// Handlers and macros are the same either way; each key's messages are
/// handled in publish order, one at a time, and different keys in parallel.
/// What differs is what a broker coordinates: a lease, a stream and an
/// index entry per key, or per hashed partition (see docs/REDIS.md,
/// "Choosing how a category is partitioned").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Partitions {
    /// `partitions = "per_key"` (the default): each key is its own partition.
    #[default]
    PerKey,
    /// `partitions = N`: N partitions, each holding many keys; a key's
    /// messages go to partition [`hashed_partition`](crate::contract::key::hashed_partition)`(key, N)`.
    /// Changing N moves keys between partitions: an offline operation (see
    /// docs/OPERATIONS.md, "Changing a category's partitions").
    Hashed(std::num::NonZeroU32),
}

impl fmt::Display for Partitions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PerKey => f.write_str("per_key"),
            Self::Hashed(n) => write!(f, "{n}"),
        }
    }
}

/// `[outbox]`: what a commit accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxConfig {
    max_payload_bytes: usize,
}

impl OutboxConfig {
    /// `max_payload_bytes`: the largest serialised event a unit of work
    /// commits (default 4 MiB); a larger one fails the commit with
    /// `CommitError::PayloadTooLarge` and nothing is written.
    pub fn max_payload_bytes(&self) -> usize {
        self.max_payload_bytes
    }
}

/// `[commands]`: how `Domain::send` waits for a command's outcome on a
/// broker that routes commands across instances (the Redis broker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandsConfig {
    timeout: Duration,
    dedup_window: Duration,
}

impl Default for CommandsConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_millis(COMMANDS_TIMEOUT_MS),
            dedup_window: Duration::from_millis(COMMANDS_DEDUP_WINDOW_MS),
        }
    }
}

impl CommandsConfig {
    /// `timeout_ms`: how long a sender waits for a command's outcome unless
    /// the call sets its own (default 10 s). Past it the call fails with
    /// `DispatchError::Timeout`: the command may still run.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `dedup_window_ms`: how long a command's outcome is kept under its id
    /// (default 10 minutes): a resend with the same id within it gets the
    /// first outcome without running again.
    pub fn dedup_window(&self) -> Duration {
        self.dedup_window
    }
}

/// `[handlers.NAME]`: one handler's own retries, backoff and concurrency,
/// overriding `[server.partitioning]` for it. Set in `domain.toml` or with
/// `DomainBuilder::handler_settings` (which wins, key by key). `init()`
/// rejects a name no registered handler has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HandlerConfig {
    max_retries: Option<u32>,
    backoff: Option<Backoff>,
    max_concurrency: Option<usize>,
    /// `Duration::ZERO`: no timeout.
    timeout: Option<Duration>,
    timeout_is_transient: Option<bool>,
    /// `Duration::ZERO`: no limit.
    max_transient: Option<Duration>,
    pause_min_keys: Option<u32>,
    ack_window: Option<u32>,
}

/// The largest `ack_window`: what a failover may run again, and what the
/// commit marker keeps per key, stay small.
pub const MAX_ACK_WINDOW: u32 = 1024;

impl HandlerConfig {
    /// No override: the handler uses `[server.partitioning]`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Retries after the first failed attempt (see [the definition](self#retries-what-max_retries--n-means)).
    #[must_use]
    pub fn with_max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = Some(max_retries);
        self
    }

    /// The backoff between this handler's attempts.
    #[must_use]
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// At most `max_concurrency` runs of this handler at once in this
    /// process (within the process-wide `max_concurrency`).
    #[must_use]
    pub fn with_max_concurrency(mut self, max_concurrency: std::num::NonZeroUsize) -> Self {
        self.max_concurrency = Some(max_concurrency.get());
        self
    }

    /// Cancels an attempt of this handler that runs longer than `timeout`
    /// (`Duration::ZERO`: never); see [Timeouts](self#timeouts).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Whether a timed-out attempt is transient (not counted) rather than
    /// a failed attempt.
    #[must_use]
    pub fn with_timeout_is_transient(mut self, transient: bool) -> Self {
        self.timeout_is_transient = Some(transient);
        self
    }

    /// Gives up on a message that fails transiently for longer than
    /// `max_transient` (`Duration::ZERO`: never).
    #[must_use]
    pub fn with_max_transient(mut self, max_transient: Duration) -> Self {
        self.max_transient = Some(max_transient);
        self
    }

    /// Pauses the handler (in each process) when at least `keys` of its keys
    /// fail transiently and most attempts do (0: never); see
    /// [`crate::contract::retry::breaker`].
    #[must_use]
    pub fn with_pause_min_keys(mut self, keys: u32) -> Self {
        self.pause_min_keys = Some(keys);
        self
    }

    /// Lets a key's worker run up to `window` messages of its read batch
    /// ahead of their acknowledgements (0, the default: each message's
    /// acknowledgement is answered before the next one starts). Faster for
    /// a hot key (no round trip between messages); after a failover up to
    /// `window` messages run again, in order, and effects committed through
    /// the fence (`RedisFence`) still apply once. Per-key partitions of
    /// event handlers only (`init()` refuses it elsewhere); at most
    /// [`MAX_ACK_WINDOW`].
    #[must_use]
    pub fn with_ack_window(mut self, window: u32) -> Self {
        self.ack_window = Some(window);
        self
    }

    /// The `ack_window` override.
    pub fn ack_window(&self) -> Option<u32> {
        self.ack_window
    }

    /// The `max_retries` override.
    pub fn max_retries(&self) -> Option<u32> {
        self.max_retries
    }

    /// The timeout override (`Some(None)`: no timeout).
    pub fn timeout(&self) -> Option<Option<Duration>> {
        self.timeout.map(|t| (!t.is_zero()).then_some(t))
    }

    /// The `timeout_is_transient` override.
    pub fn timeout_is_transient(&self) -> Option<bool> {
        self.timeout_is_transient
    }

    /// The `max_transient_ms` override (`Some(None)`: no limit).
    pub fn max_transient(&self) -> Option<Option<Duration>> {
        self.max_transient.map(|t| (!t.is_zero()).then_some(t))
    }

    /// The `pause_min_keys` override.
    pub fn pause_min_keys(&self) -> Option<u32> {
        self.pause_min_keys
    }

    /// The backoff override.
    pub fn backoff(&self) -> Option<Backoff> {
        self.backoff
    }

    /// The `max_concurrency` override.
    pub fn max_concurrency(&self) -> Option<usize> {
        self.max_concurrency
    }

    /// `self` with every setting `over` has replaced by `over`'s.
    #[must_use]
    pub fn overridden_by(&self, over: &HandlerConfig) -> HandlerConfig {
        HandlerConfig {
            max_retries: over.max_retries.or(self.max_retries),
            backoff: over.backoff.or(self.backoff),
            max_concurrency: over.max_concurrency.or(self.max_concurrency),
            timeout: over.timeout.or(self.timeout),
            timeout_is_transient: over.timeout_is_transient.or(self.timeout_is_transient),
            max_transient: over.max_transient.or(self.max_transient),
            pause_min_keys: over.pause_min_keys.or(self.pause_min_keys),
            ack_window: over.ack_window.or(self.ack_window),
        }
    }
}

/// `[health]`: when `RunningDomain::health()` and `ordo status --check`
/// call a subscription `lagging`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthConfig {
    max_lag: u64,
    max_pending_age: Duration,
}

impl HealthConfig {
    /// `max_lag`: more entries not yet delivered to a handler than this,
    /// over all its partitions (or base streams), is `lagging`.
    pub fn max_lag(&self) -> u64 {
        self.max_lag
    }

    /// `max_pending_age_ms`: an entry delivered and unacknowledged for
    /// longer than this (a slow or retrying handler) is `lagging`.
    pub fn max_pending_age(&self) -> Duration {
        self.max_pending_age
    }
}

/// `[server.partitioning]`, the keys this crate reads: polling, retries and
/// concurrency. A broker's own keys of the table are read by the broker
/// (see [`Config::broker_partitioning`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PartitioningConfig {
    poll_interval: Duration,
    max_retries: u32,
    backoff: Backoff,
    max_concurrency: usize,
    handler_timeout: Option<Duration>,
    timeout_is_transient: bool,
    max_transient: Option<Duration>,
    pause_min_keys: u32,
}

/// `[server.priority_lanes]`: the low-priority backfill lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityLanesConfig {
    enabled: bool,
    backfill_suffix: String,
    threshold: i32,
}

impl Default for Config {
    fn default() -> Self {
        Self::from_raw(RawFile::default()).expect("the built-in defaults are valid")
    }
}

impl Config {
    /// Parses and validates the text of a `domain.toml`.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let table: toml::Table = toml::from_str(text).map_err(|error| ConfigError::Parse(error.into()))?;
        check_keys(&table, "", &SCHEMA)?;
        // Parsed again from the text so that a type error points at its line.
        let raw: RawFile = toml::from_str(text).map_err(|error| ConfigError::Parse(error.into()))?;
        let mut config = Self::from_raw(raw)?;
        config.broker_partitioning = broker_keys(&table);
        Ok(config)
    }

    /// Reads, parses and validates a `domain.toml` file, the file alone (no
    /// environment: see [`Config::load`]). An error about a setting names
    /// its line ([`ConfigError::At`]).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        Self::load_with_env(Some(path.as_ref()), std::iter::empty())
    }

    /// The domain configuration in its layers, the documented precedence of
    /// the library, the `ordo` tool and `ordo-pg-relay`: the file, then the
    /// environment, then code.
    ///
    /// 1. The file: `path`, else the file the `ORDO_CONFIG` environment
    ///    variable names, else none (every setting at its default).
    /// 2. The environment: every `ORDO_` variable that names a setting
    ///    overrides the file's (`ORDO_SERVER_PARTITIONING_LEASE_TTL_MS=5000`
    ///    for `[server.partitioning] lease_ttl_ms`; see [`env_var_names`] and
    ///    docs/OPERATIONS.md, "Configuration").
    /// 3. Code: what the application sets after loading
    ///    ([`Config::with_partitions`], `DomainBuilder::handler_settings`,
    ///    the broker builders' methods) overrides both.
    ///
    /// # Errors
    ///
    /// An error about a setting is [`ConfigError::At`], naming the file and
    /// line or the environment variable it came from; a variable under a
    /// table of the configuration that names no setting (a typo such as
    /// `ORDO_HEALTH_MAX_LAGG`) is [`ConfigError::UnknownEnvVar`].
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_with_env(path, std::env::vars())
    }

    /// [`Config::load`] with the environment given as `(name, value)` pairs
    /// instead of the process's (for tests, and programs that hold their
    /// environment apart). `ORDO_CONFIG` is looked up in `env` too.
    pub fn load_with_env(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let env: Vec<(String, String)> = env.into_iter().collect();
        let named = env
            .iter()
            .find(|(name, value)| name == CONFIG_FILE_ENV && !value.is_empty())
            .map(|(_, value)| std::path::PathBuf::from(value));
        let path = path.map(Path::to_owned).or(named);
        let text = match &path {
            Some(path) => Some(std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
                path: path.clone(),
                source,
            })?),
            None => None,
        };
        let file = text.as_deref().map(|text| (path.as_deref(), text));
        let layered = layers::layer(file, env)?;
        let origins = layered.origins;
        check_keys(&layered.table, "", &SCHEMA).map_err(|error| origins.locate(error))?;
        let raw: RawFile = toml::Value::Table(layered.table.clone())
            .try_into()
            .map_err(|error| origins.locate(ConfigError::Parse(error.into())))?;
        let mut config = Self::from_raw(raw).map_err(|error| origins.locate(error))?;
        config.broker_partitioning = broker_keys(&layered.table);
        config.tables = other_tables(&layered.table);
        config.origins = origins;
        Ok(config)
    }

    /// A table of the configuration that another crate reads, after the
    /// layers were merged: `redis` (the `ordo` tool), `cli`, `relay`
    /// (`ordo-pg-relay`), `outbox` (its `schema`). `None` when no layer
    /// sets any of its keys.
    pub fn table(&self, name: &str) -> Option<&toml::Table> {
        self.tables.get(name).and_then(toml::Value::as_table)
    }

    /// The table `name` that another crate reads (`redis`, `cli`, `relay`,
    /// `outbox`; see [`Config::table`]), into `T`, the serde struct that
    /// crate declares for it (`ordo_redis::RedisConfig` for `[redis]`).
    /// Every key of it is optional: a table no layer sets is `T` with none.
    ///
    /// # Errors
    ///
    /// [`ConfigError::WrongType`] naming the key (and where it was set,
    /// [`ConfigError::At`]) for a value of the wrong type.
    pub fn section<T: serde::de::DeserializeOwned>(&self, name: &'static str) -> Result<T, ConfigError> {
        let empty = toml::Table::new();
        let table = self.table(name).unwrap_or(&empty);
        section::deserialize_table(table, name).map_err(|error| self.locate(error))
    }

    /// Where the setting at `key` (dotted, like
    /// `server.partitioning.lease_ttl_ms`) came from: the environment
    /// variable or the file's line; `None` for a default, or a setting made
    /// in code.
    pub fn origin(&self, key: &str) -> Option<Origin> {
        self.origins.of(key)
    }

    /// `error` (about a key of this configuration, as a broker's or a
    /// tool's own validation reports it) with where that key was set
    /// ([`ConfigError::At`]); unchanged when it was not set by a layer.
    pub fn locate(&self, error: ConfigError) -> ConfigError {
        self.origins.locate(error)
    }

    /// `[server.partitioning]`.
    pub fn partitioning(&self) -> &PartitioningConfig {
        &self.partitioning
    }

    /// The keys of `[server.partitioning]` that this crate does not read,
    /// for the broker that reads them: `keys` are the ones it declares
    /// ([`Broker::partitioning_keys`](crate::contract::broker::Broker::partitioning_keys)).
    /// The broker validates their values itself.
    ///
    /// # Errors
    ///
    /// [`ConfigError::UnknownKey`] for a key that neither this crate nor
    /// `keys` names, listing both.
    pub fn broker_partitioning(&self, keys: &[&'static str]) -> Result<&toml::Table, ConfigError> {
        match self.unknown_partitioning_key(keys) {
            Some((key, valid)) => Err(ConfigError::UnknownKey { key, valid }),
            None => Ok(&self.broker_partitioning),
        }
    }

    /// The broker's keys of `[server.partitioning]` read into `T`, the
    /// serde struct that declares them (its fields are the keys: see
    /// [`struct_fields`]). The broker validates the ranges itself (with
    /// [`positive_int`], [`positive_seconds`] and its own rules).
    ///
    /// # Errors
    ///
    /// [`ConfigError::UnknownKey`] for a key of the table that neither this
    /// crate nor `T` names, listing both; [`ConfigError::WrongType`] naming
    /// the key for a value of the wrong type.
    pub fn broker_section<T: serde::de::DeserializeOwned>(&self) -> Result<T, ConfigError> {
        let table = self.broker_partitioning(struct_fields::<T>())?;
        section::deserialize_table(table, PARTITIONING)
    }

    /// The first key of `[server.partitioning]` that neither this crate nor
    /// `keys` names, in full, with the valid keys of the table.
    pub(crate) fn unknown_partitioning_key(
        &self,
        keys: &[&'static str],
    ) -> Option<(String, Vec<&'static str>)> {
        let unknown = self
            .broker_partitioning
            .keys()
            .find(|key| !keys.contains(&key.as_str()))?;
        let mut valid = PARTITIONING_KEYS.to_vec();
        valid.extend(keys.iter().filter(|key| !PARTITIONING_KEYS.contains(key)));
        Some((format!("{PARTITIONING}.{unknown}"), valid))
    }

    /// `[server.priority_lanes]`.
    pub fn priority_lanes(&self) -> &PriorityLanesConfig {
        &self.priority_lanes
    }

    /// `[handlers.NAME]` tables, by handler name.
    pub fn handlers(&self) -> &BTreeMap<String, HandlerConfig> {
        &self.handlers
    }

    /// `[health]`.
    pub fn health(&self) -> &HealthConfig {
        &self.health
    }

    /// `[outbox]`.
    pub fn outbox(&self) -> &OutboxConfig {
        &self.outbox
    }

    /// `[commands]`.
    pub fn commands(&self) -> &CommandsConfig {
        &self.commands
    }

    /// How `category` is partitioned (`[categories.NAME] partitions`;
    /// [`Partitions::PerKey`] when the file does not say).
    pub fn partitions(&self, category: &str) -> Partitions {
        self.categories.get(category).copied().unwrap_or_default()
    }

    /// The categories with a `[categories.NAME]` table, and their partitioning.
    pub fn categories(&self) -> &BTreeMap<String, Partitions> {
        &self.categories
    }

    /// `self` with `category` partitioned as `partitions` (as
    /// `[categories.NAME] partitions` sets it).
    #[must_use]
    pub fn with_partitions(mut self, category: impl Into<String>, partitions: Partitions) -> Self {
        self.categories.insert(category.into(), partitions);
        self
    }

    /// The key validation rules, with the configured backfill suffix reserved.
    pub fn key_rules(&self) -> KeyRules {
        KeyRules::with_backfill_suffix(self.priority_lanes.backfill_suffix.clone())
    }

    fn from_raw(raw: RawFile) -> Result<Self, ConfigError> {
        let partitioning = raw.server.partitioning.validate()?;
        let handlers = raw
            .handlers
            .into_iter()
            .map(|(name, handler)| {
                let validated = handler.validate(&name, &partitioning)?;
                Ok((name, validated))
            })
            .collect::<Result<_, ConfigError>>()?;
        Ok(Self {
            partitioning,
            tables: toml::Table::new(),
            origins: layers::Origins::default(),
            broker_partitioning: toml::Table::new(),
            priority_lanes: raw.server.priority_lanes.validate()?,
            handlers,
            health: raw.health.validate()?,
            outbox: raw.outbox.validate()?,
            commands: raw.commands.validate()?,
            categories: raw
                .categories
                .into_iter()
                .map(|(name, category)| Ok((name.clone(), category.validate(&name)?)))
                .collect::<Result<_, ConfigError>>()?,
        })
    }
}

impl PartitioningConfig {
    /// `poll_interval_seconds`: how long an idle poller waits between checks.
    pub fn poll_interval(&self) -> Duration {
        self.poll_interval
    }

    /// `max_retries`: retries after a handler's first failed attempt (0: none).
    pub fn max_retries(&self) -> u32 {
        self.max_retries
    }

    /// The retry backoff from `retry_backoff_initial_ms` and `retry_backoff_max_ms`.
    pub fn backoff(&self) -> Backoff {
        self.backoff
    }

    /// `max_concurrency`: how many handler runs the in-process executors allow at once.
    pub fn max_concurrency(&self) -> usize {
        self.max_concurrency
    }

    /// `handler_timeout_ms`: how long an attempt may run before it is
    /// cancelled (`None`: no limit; see [Timeouts](self#timeouts)).
    pub fn handler_timeout(&self) -> Option<Duration> {
        self.handler_timeout
    }

    /// `timeout_is_transient`: whether a timed-out attempt is transient.
    pub fn timeout_is_transient(&self) -> bool {
        self.timeout_is_transient
    }

    /// `max_transient_ms`: how long one message may fail transiently before
    /// it halts its key (`None`: for ever).
    pub fn max_transient(&self) -> Option<Duration> {
        self.max_transient
    }

    /// `pause_min_keys`: how many keys failing transiently pause a handler
    /// (0: never).
    pub fn pause_min_keys(&self) -> u32 {
        self.pause_min_keys
    }
}

impl PriorityLanesConfig {
    /// `enabled`: whether backfill events go to the backfill lane.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// `backfill_suffix`: the backfill lane's stream suffix.
    pub fn backfill_suffix(&self) -> &str {
        &self.backfill_suffix
    }

    /// `threshold`: events of a unit of work whose priority
    /// (`UnitOfWork::with_priority`) is below it go to the backfill lane,
    /// like `raise_backfill` ones (when the lanes are enabled).
    pub fn threshold(&self) -> i32 {
        self.threshold
    }
}

/// The tables of `table` (a merged, checked configuration) that other
/// crates read.
fn other_tables(table: &toml::Table) -> toml::Table {
    table
        .iter()
        .filter(|(name, _)| ["redis", "cli", "relay", "outbox"].contains(&name.as_str()))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}

/// The keys of `[server.partitioning]` in `table` (a checked file) that
/// this crate does not read.
fn broker_keys(table: &toml::Table) -> toml::Table {
    let partitioning = table
        .get("server")
        .and_then(|server| server.get("partitioning"))
        .and_then(toml::Value::as_table);
    partitioning
        .into_iter()
        .flatten()
        .filter(|(key, _)| !PARTITIONING_KEYS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

impl RawCategory {
    fn validate(self, category: &str) -> Result<Partitions, ConfigError> {
        let bad = |reason: String| ConfigError::InvalidCategorySetting {
            category: category.to_owned(),
            key: "partitions",
            reason,
        };
        match self.partitions {
            None => Ok(Partitions::PerKey),
            Some(toml::Value::String(text)) if text == "per_key" => Ok(Partitions::PerKey),
            Some(toml::Value::Integer(n)) => u32::try_from(n)
                .ok()
                .filter(|n| *n <= MAX_HASHED_PARTITIONS)
                .and_then(std::num::NonZeroU32::new)
                .map(Partitions::Hashed)
                .ok_or_else(|| bad(format!("must be between 1 and {MAX_HASHED_PARTITIONS}, got {n}"))),
            Some(other) => Err(bad(format!(
                "must be \"per_key\" or a number of partitions, got {}",
                match other {
                    toml::Value::String(text) => format!("\"{text}\""),
                    other => with_article(other.type_str()).to_owned(),
                }
            ))),
        }
    }
}

impl RawOutbox {
    fn validate(self) -> Result<OutboxConfig, ConfigError> {
        let bytes = positive_int(
            "outbox.max_payload_bytes",
            self.max_payload_bytes,
            MAX_PAYLOAD_BYTES,
        )?;
        let max_payload_bytes = usize::try_from(bytes)
            .map_err(|_| invalid("outbox.max_payload_bytes", format!("is too large, got {bytes}")))?;
        Ok(OutboxConfig { max_payload_bytes })
    }
}

impl RawCommands {
    fn validate(self) -> Result<CommandsConfig, ConfigError> {
        Ok(CommandsConfig {
            timeout: Duration::from_millis(positive_int(
                "commands.timeout_ms",
                self.timeout_ms,
                COMMANDS_TIMEOUT_MS,
            )?),
            dedup_window: Duration::from_millis(positive_int(
                "commands.dedup_window_ms",
                self.dedup_window_ms,
                COMMANDS_DEDUP_WINDOW_MS,
            )?),
        })
    }
}

impl RawHandler {
    /// A backoff bound given alone is paired with the other bound of
    /// `[server.partitioning]`.
    fn validate(self, name: &str, defaults: &PartitioningConfig) -> Result<HandlerConfig, ConfigError> {
        let bad = |key: &'static str, reason: String| ConfigError::InvalidHandlerSetting {
            handler: name.to_owned(),
            key,
            reason,
        };
        let max_retries = self
            .max_retries
            .map(|v| {
                u32::try_from(v).map_err(|_| {
                    bad(
                        "max_retries",
                        format!("must be between 0 and {}, got {v}", u32::MAX),
                    )
                })
            })
            .transpose()?;
        let positive = |key: &'static str, value: Option<i64>| match value {
            Some(v) if v <= 0 => Err(bad(key, format!("must be greater than 0, got {v}"))),
            other => Ok(other.map(i64::unsigned_abs)),
        };
        let initial = positive("retry_backoff_initial_ms", self.retry_backoff_initial_ms)?;
        let max = positive("retry_backoff_max_ms", self.retry_backoff_max_ms)?;
        let backoff = if initial.is_none() && max.is_none() {
            None
        } else {
            let initial = initial.map_or(defaults.backoff.initial(), Duration::from_millis);
            let max = max.map_or(defaults.backoff.max(), Duration::from_millis);
            Some(Backoff::new(initial, max).map_err(|_| {
                bad(
                    "retry_backoff_max_ms",
                    format!(
                        "must be at least the initial delay ({} ms), got {} ms",
                        initial.as_millis(),
                        max.as_millis()
                    ),
                )
            })?)
        };
        let max_concurrency = positive("max_concurrency", self.max_concurrency)?
            .map(|v| usize::try_from(v).map_err(|_| bad("max_concurrency", format!("is too large, got {v}"))))
            .transpose()?;
        let millis = |key: &'static str, value: Option<i64>| {
            value
                .map(|v| {
                    u64::try_from(v)
                        .map(Duration::from_millis)
                        .map_err(|_| bad(key, format!("must be 0 (no limit) or more, got {v}")))
                })
                .transpose()
        };
        let pause_min_keys = self
            .pause_min_keys
            .map(|v| {
                u32::try_from(v).map_err(|_| {
                    bad(
                        "pause_min_keys",
                        format!("must be between 0 (never pause) and {}, got {v}", u32::MAX),
                    )
                })
            })
            .transpose()?;
        let ack_window = self
            .ack_window
            .map(|v| {
                u32::try_from(v)
                    .ok()
                    .filter(|w| *w <= MAX_ACK_WINDOW)
                    .ok_or_else(|| {
                        bad(
                            "ack_window",
                            format!("must be between 0 and {MAX_ACK_WINDOW}, got {v}"),
                        )
                    })
            })
            .transpose()?;
        Ok(HandlerConfig {
            ack_window,
            max_retries,
            backoff,
            max_concurrency,
            timeout: millis("timeout_ms", self.timeout_ms)?,
            timeout_is_transient: self.timeout_is_transient,
            max_transient: millis("max_transient_ms", self.max_transient_ms)?,
            pause_min_keys,
        })
    }
}

impl RawHealth {
    fn validate(self) -> Result<HealthConfig, ConfigError> {
        let max_lag = match self.max_lag {
            None => HEALTH_MAX_LAG,
            Some(v) => u64::try_from(v)
                .map_err(|_| invalid("health.max_lag", format!("must be 0 or more, got {v}")))?,
        };
        Ok(HealthConfig {
            max_lag,
            max_pending_age: Duration::from_millis(positive_int(
                "health.max_pending_age_ms",
                self.max_pending_age_ms,
                HEALTH_MAX_PENDING_AGE_MS,
            )?),
        })
    }
}

const PARTITIONING: &str = "server.partitioning";

impl RawPartitioning {
    fn validate(self) -> Result<PartitioningConfig, ConfigError> {
        let initial_ms = positive_int(
            "server.partitioning.retry_backoff_initial_ms",
            self.retry_backoff_initial_ms,
            RETRY_BACKOFF_INITIAL_MS,
        )?;
        let max_ms = positive_int(
            "server.partitioning.retry_backoff_max_ms",
            self.retry_backoff_max_ms,
            RETRY_BACKOFF_MAX_MS,
        )?;
        let backoff = Backoff::new(Duration::from_millis(initial_ms), Duration::from_millis(max_ms))
            .map_err(|_| {
                invalid(
                    "server.partitioning.retry_backoff_max_ms",
                    format!("must be at least retry_backoff_initial_ms ({initial_ms}), got {max_ms}"),
                )
            })?;
        Ok(PartitioningConfig {
            poll_interval: positive_seconds(
                "server.partitioning.poll_interval_seconds",
                self.poll_interval_seconds,
                POLL_INTERVAL_SECONDS,
            )?,
            max_retries: max_retries(self.max_retries)?,
            backoff,
            max_concurrency: max_concurrency(self.max_concurrency)?,
            handler_timeout: limit(
                "server.partitioning.handler_timeout_ms",
                self.handler_timeout_ms,
                HANDLER_TIMEOUT_MS,
            )?,
            timeout_is_transient: self.timeout_is_transient.unwrap_or(false),
            max_transient: limit(
                "server.partitioning.max_transient_ms",
                self.max_transient_ms,
                MAX_TRANSIENT_MS,
            )?,
            pause_min_keys: match self.pause_min_keys {
                None => PAUSE_MIN_KEYS,
                Some(v) => u32::try_from(v).map_err(|_| {
                    invalid(
                        "server.partitioning.pause_min_keys",
                        format!("must be between 0 (never pause) and {}, got {v}", u32::MAX),
                    )
                })?,
            },
        })
    }
}

impl RawPriorityLanes {
    fn validate(self) -> Result<PriorityLanesConfig, ConfigError> {
        let backfill_suffix = self
            .backfill_suffix
            .unwrap_or_else(|| DEFAULT_BACKFILL_SUFFIX.to_owned());
        validate_suffix(&backfill_suffix)?;
        let threshold = match self.threshold {
            None => PRIORITY_THRESHOLD,
            Some(v) => i32::try_from(v).map_err(|_| {
                invalid(
                    "server.priority_lanes.threshold",
                    format!("must be between {} and {}, got {v}", i32::MIN, i32::MAX),
                )
            })?,
        };
        Ok(PriorityLanesConfig {
            enabled: self.enabled.unwrap_or(false),
            backfill_suffix,
            threshold,
        })
    }
}

/// The suffix becomes a stream-name segment, so it obeys the key rules
/// itself (and is not the dead-letter token).
fn validate_suffix(suffix: &str) -> Result<(), ConfigError> {
    match segment_rule(suffix) {
        Some(rule) => Err(invalid(
            "server.priority_lanes.backfill_suffix",
            format!("the suffix names stream segments as a key does, and {rule}; got {suffix:?}"),
        )),
        None => Ok(()),
    }
}

fn invalid(key: &'static str, reason: String) -> ConfigError {
    ConfigError::Invalid { key, reason }
}

/// A limit in milliseconds where 0 means none.
fn limit(key: &'static str, value: Option<i64>, default: u64) -> Result<Option<Duration>, ConfigError> {
    let ms = match value {
        None => default,
        Some(v) => {
            u64::try_from(v).map_err(|_| invalid(key, format!("must be 0 (no limit) or more, got {v}")))?
        }
    };
    Ok((ms > 0).then(|| Duration::from_millis(ms)))
}

fn max_retries(value: Option<i64>) -> Result<u32, ConfigError> {
    const KEY: &str = "server.partitioning.max_retries";
    match value {
        None => Ok(MAX_RETRIES),
        Some(v) => {
            u32::try_from(v).map_err(|_| invalid(KEY, format!("must be between 0 and {}, got {v}", u32::MAX)))
        }
    }
}

fn max_concurrency(value: Option<i64>) -> Result<usize, ConfigError> {
    const KEY: &str = "server.partitioning.max_concurrency";
    let value = positive_int(KEY, value, MAX_CONCURRENCY)?;
    usize::try_from(value).map_err(|_| invalid(KEY, format!("is too large, got {value}")))
}

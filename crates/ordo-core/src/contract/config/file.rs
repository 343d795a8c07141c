//! The serde structs of `domain.toml`, a struct per table of ordo-core:
//! the one declaration of the file's keys. `config.rs` validates them into
//! the [`Config`](super::Config); `schema.rs` reads the keys from them.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The file, a struct per table: the one declaration of `domain.toml`'s
/// keys. The schema that names an unknown key and the `ORDO_` variables
/// are read from these structs (`schema.rs`), in the order they declare
/// their fields.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    #[serde(default)]
    pub(super) server: RawServer,
    #[serde(default)]
    pub(super) handlers: BTreeMap<String, RawHandler>,
    #[serde(default)]
    pub(super) health: RawHealth,
    #[serde(default)]
    pub(super) outbox: RawOutbox,
    #[serde(default)]
    pub(super) commands: RawCommands,
    #[serde(default)]
    pub(super) categories: BTreeMap<String, RawCategory>,
    #[serde(default)]
    #[expect(dead_code, reason = "read by the `ordo` tool; only its type is checked here")]
    pub(super) redis: RawRedis,
    #[serde(default)]
    #[expect(dead_code, reason = "read by the `ordo` tool; only its type is checked here")]
    pub(super) cli: RawCli,
    #[serde(default)]
    #[expect(dead_code, reason = "read by `ordo-pg-relay`; only its type is checked here")]
    pub(super) relay: RawRelay,
}

/// `[relay]`: declared and read by `ordo-pg-relay` (`RelayConfig` in
/// crates/ordo-pg-relay/src/main.rs); its keys are checked here so a typo
/// is caught, and a test of ordo-pg-relay holds them to its fields.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the [relay] table")]
#[expect(
    dead_code,
    reason = "the value is read by `ordo-pg-relay`; only its type is checked here"
)]
pub(super) struct RawRelay {
    pub(super) lease_ttl_ms: Option<u64>,
    pub(super) poll_ms: Option<u64>,
    pub(super) retention_s: Option<u64>,
    pub(super) batch_bytes: Option<u64>,
    pub(super) publish_call_bytes: Option<u64>,
    pub(super) max_row_bytes: Option<u64>,
}

/// `[redis]`: declared and read by ordo-redis (`ordo_redis::RedisConfig`,
/// for the `ordo` tool and `ordo-pg-relay`); its keys are checked here so a
/// typo is caught, and a test of ordo-redis holds them to its fields.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the [redis] table")]
#[expect(
    dead_code,
    reason = "the value is read by the `ordo` tool; only its type is checked here"
)]
pub(super) struct RawRedis {
    pub(super) url: Option<String>,
    pub(super) tls_ca_file: Option<std::path::PathBuf>,
    pub(super) tls_cert_file: Option<std::path::PathBuf>,
    pub(super) tls_key_file: Option<std::path::PathBuf>,
}

/// `[cli]`: declared and read by the `ordo` tool (`CliConfig` in
/// crates/ordo-cli/src/settings.rs); its keys are checked here so a typo is
/// caught, and a test of ordo-cli holds them to its fields.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the [cli] table")]
#[expect(
    dead_code,
    reason = "the value is read by the `ordo` tool; only its type is checked here"
)]
pub(super) struct RawCli {
    pub(super) warn_partitions: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the [server] table")]
pub(super) struct RawServer {
    #[serde(default)]
    pub(super) partitioning: RawPartitioning,
    #[serde(default)]
    pub(super) priority_lanes: RawPriorityLanes,
}

/// Integers are read signed so that a negative value gets a message naming
/// its key rather than a type error. Other keys are the broker's, kept by
/// `broker_keys` in `config.rs` (the file's keys were checked by `check_keys`).
#[derive(Debug, Default, Deserialize)]
#[serde(expecting = "the [server.partitioning] table")]
pub(super) struct RawPartitioning {
    pub(super) poll_interval_seconds: Option<f64>,
    pub(super) max_retries: Option<i64>,
    pub(super) retry_backoff_initial_ms: Option<i64>,
    pub(super) retry_backoff_max_ms: Option<i64>,
    pub(super) max_concurrency: Option<i64>,
    pub(super) handler_timeout_ms: Option<i64>,
    pub(super) timeout_is_transient: Option<bool>,
    pub(super) max_transient_ms: Option<i64>,
    pub(super) pause_min_keys: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the [server.priority_lanes] table")]
pub(super) struct RawPriorityLanes {
    pub(super) enabled: Option<bool>,
    pub(super) backfill_suffix: Option<String>,
    pub(super) threshold: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [handlers.NAME] table")]
pub(super) struct RawHandler {
    pub(super) max_retries: Option<i64>,
    pub(super) retry_backoff_initial_ms: Option<i64>,
    pub(super) retry_backoff_max_ms: Option<i64>,
    pub(super) max_concurrency: Option<i64>,
    pub(super) timeout_ms: Option<i64>,
    pub(super) timeout_is_transient: Option<bool>,
    pub(super) max_transient_ms: Option<i64>,
    pub(super) pause_min_keys: Option<i64>,
    pub(super) ack_window: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the [health] table")]
pub(super) struct RawHealth {
    pub(super) max_lag: Option<i64>,
    pub(super) max_pending_age_ms: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [categories.NAME] table")]
pub(super) struct RawCategory {
    pub(super) partitions: Option<toml::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the [commands] table")]
pub(super) struct RawCommands {
    pub(super) timeout_ms: Option<i64>,
    pub(super) dedup_window_ms: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the [outbox] table")]
pub(super) struct RawOutbox {
    pub(super) max_payload_bytes: Option<i64>,
    /// The PostgreSQL outbox's schema: read by `ordo-pg-relay` (its
    /// `OutboxSchema`, held to this key by a test).
    #[expect(dead_code, reason = "read by `ordo-pg-relay`; only its type is checked here")]
    pub(super) schema: Option<String>,
}

//! Where the CLI finds Redis and its settings.
//!
//! The Redis URL comes from `--redis-url`, else the first line of
//! `--redis-url-file`, else `ORDO_REDIS_URL`, else `REDIS_URL`, else the
//! `[redis]` table of the domain.toml, else `redis://127.0.0.1:6379`; a Redis
//! Cluster is named by its nodes, `redis-cluster://host:port,host:port,...`. The
//! domain.toml is `--config PATH`, else the file `ORDO_CONFIG` names, else the
//! nearest `domain.toml` from the current directory upward; every setting of
//! it can be overridden by its `ORDO_` environment variable
//! (`Config::load`, docs/OPERATIONS.md). Besides `[server.partitioning]` (read by
//! ordo-core's `Config` and, for the Redis broker's keys, checked by
//! `ordo_redis::RedisSettings`) and `[server.priority_lanes]` (read by
//! ordo-core's `Config`: the backfill suffix names the backfill lanes), the
//! CLI reads `[redis]` (as ordo-redis declares it, `ordo_redis::RedisConfig`)
//! and a table of its own, `[cli]` (docs/domain.toml has them all):
//!
//! ```toml
//! [redis]
//! url = "redis://127.0.0.1:6379/0"   # or "redis-cluster://10.0.0.1:7000,10.0.0.2:7000"
//!
//! # rediss:// only: the CA to trust (default: the system's), and a client
//! # certificate for mutual TLS; paths relative to this file.
//! # tls_ca_file = "redis-ca.pem"
//! # tls_cert_file = "ordo-client.pem"
//! # tls_key_file = "ordo-client.key"
//!
//! [cli]
//! warn_partitions = 10000   # `ordo status` warns above this many live partitions per category
//! ```

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use ordo_core::contract::config::{CONFIG_FILE_ENV, Config, ConfigError, Origin};
use ordo_redis::{RedisConfig, SecretUrl, TlsFiles};
use serde::Deserialize;

use crate::cli::GlobalArgs;
use crate::exit::Failure;

/// The file name looked for from the current directory upward.
const FILE_NAME: &str = "domain.toml";
/// Redis when nothing names one.
const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";
/// The partition-count warning threshold when nothing sets one.
const DEFAULT_WARN_PARTITIONS: u64 = 10_000;

/// The resolved settings.
#[derive(Debug, Clone)]
pub(crate) struct CliSettings {
    /// Shown only redacted (`Display` and `Debug` mask the password).
    pub(crate) redis_url: SecretUrl,
    /// The TLS files of a `rediss://` URL: `--tls-*-file`, else `[redis] tls_*_file`.
    pub(crate) tls: TlsFiles,
    /// The domain configuration (defaults when no domain.toml was found).
    pub(crate) config: Config,
    /// `[cli] warn_partitions`, or the default.
    pub(crate) warn_partitions: u64,
}

/// The tables of domain.toml the CLI reads (the whole file, unknown keys
/// included, is checked by `Config::load_with_env`, and the Redis broker's
/// keys of `[server.partitioning]` by `RedisSettings::from_config`):
/// `[redis]` as ordo-redis declares it, and its own `[cli]`.
#[derive(Debug, Default)]
struct CliFile {
    redis: RedisConfig,
    cli: CliConfig,
}

/// `[cli]` of the domain configuration: the one declaration of the table
/// the `ordo` tool owns, read after the layers with
/// `Config::section::<CliConfig>("cli")`. ordo-core checks the table's keys
/// when it loads the file (an unknown key, an `ORDO_CLI_` variable that
/// names none); a test below holds those keys to these fields.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CliConfig {
    /// `ordo status` warns above this many live partitions per category.
    warn_partitions: Option<u64>,
}

impl CliConfig {
    /// The name of the table in domain.toml.
    const TABLE: &'static str = "cli";

    /// The `[cli]` table of `config`, after its layers (file, then the
    /// `ORDO_CLI_*` variables).
    fn from_config(config: &Config) -> Result<Self, ConfigError> {
        config.section(Self::TABLE)
    }
}

impl CliSettings {
    /// Resolves the settings from the arguments, the environment
    /// (`REDIS_URL`) and the domain.toml.
    pub(crate) fn load(args: &GlobalArgs) -> Result<Self, Failure> {
        let named = std::env::var_os(CONFIG_FILE_ENV)
            .filter(|value| !value.is_empty())
            .map(|value| (PathBuf::from(value), CONFIG_FILE_ENV));
        let path = match args.config.clone().map(|path| (path, "--config")).or(named) {
            Some((path, source)) if !path.is_file() => {
                return Err(Failure::Usage(format!(
                    "{source} {}: no such file",
                    path.display()
                )));
            }
            Some((path, _)) => Some(path),
            None => find_upward(FILE_NAME),
        };
        let (file, config) = read(path.as_deref())?;
        // domain.toml's paths are relative to the file, the flags' to the current directory.
        let base = path.as_deref().and_then(Path::parent).unwrap_or(Path::new(""));
        // A path from the environment is the current directory's.
        let place = |key: &str, file: Option<&Path>| {
            let from_env = matches!(config.origin(key), Some(Origin::Env { .. }));
            file.map(|file| {
                if from_env {
                    file.to_owned()
                } else {
                    base.join(file)
                }
            })
        };
        let tls = TlsFiles::new()
            .with_files(
                place("redis.tls_ca_file", file.redis.tls_ca_file()),
                place("redis.tls_cert_file", file.redis.tls_cert_file()),
                place("redis.tls_key_file", file.redis.tls_key_file()),
            )
            .with_files(
                args.tls_ca_file.clone(),
                args.tls_cert_file.clone(),
                args.tls_key_file.clone(),
            );
        let from_env = std::env::var("REDIS_URL").ok().filter(|url| !url.is_empty());
        // `[redis] url` of the layers: ORDO_REDIS_URL, else the file's.
        let layered = config
            .origin("redis.url")
            .filter(|origin| matches!(origin, Origin::Env { .. }));
        let (redis_url, source) = if let Some(url) = &args.redis_url {
            (url.clone(), "--redis-url".to_owned())
        } else if let Some(url_file) = &args.redis_url_file {
            (
                read_url_file(url_file, "--redis-url-file")?,
                format!("--redis-url-file {}", url_file.display()),
            )
        } else if let (Some(origin), Some(url)) = (layered, file.redis.url()) {
            (SecretUrl::new(url), origin.to_string())
        } else if let Some(url) = from_env {
            (SecretUrl::new(url), "REDIS_URL".to_owned())
        } else if let Some(url) = file.redis.url() {
            let path = path
                .as_deref()
                .map_or_else(String::new, |path| path.display().to_string());
            (SecretUrl::new(url), format!("`[redis] url` in {path}"))
        } else {
            (
                SecretUrl::new(DEFAULT_REDIS_URL),
                "the default Redis URL".to_owned(),
            )
        };
        // Checked here, before connecting, so the error says where the URL came from.
        ordo_redis::client_config(redis_url.expose())
            .map_err(|error| Failure::Usage(format!("{source}: {error}")))?;
        Ok(Self {
            redis_url,
            tls,
            config,
            warn_partitions: file.cli.warn_partitions.unwrap_or(DEFAULT_WARN_PARTITIONS),
        })
    }
}

/// The URL on the first line of the file at `path` (named by `option` in
/// errors, which never show the file's content).
pub(crate) fn read_url_file(path: &Path, option: &str) -> Result<SecretUrl, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| Failure::Usage(format!("{option} {}: cannot read it: {error}", path.display())))?;
    let url = text.lines().next().unwrap_or("").trim();
    if url.is_empty() {
        return Err(Failure::Usage(format!(
            "{option} {}: the first line is empty; write the URL there",
            path.display()
        )));
    }
    Ok(SecretUrl::new(url))
}

/// Reads the domain configuration in its layers (the file at `path`, if
/// any, then the `ORDO_` environment variables) and the CLI's tables of it.
fn read(path: Option<&Path>) -> Result<(CliFile, Config), Failure> {
    let what = || match path {
        Some(path) => format!("invalid {}", path.display()),
        None => "invalid domain configuration".to_owned(),
    };
    let config = Config::load_with_env(path, std::env::vars()).with_context(what)?;
    // The Redis broker's keys of [server.partitioning], and any typo there.
    ordo_redis::RedisSettings::from_config(&config).with_context(what)?;
    let file = CliFile {
        redis: RedisConfig::from_config(&config).with_context(what)?,
        cli: CliConfig::from_config(&config).with_context(what)?,
    };
    Ok((file, config))
}

/// The nearest `name` from the current directory upward.
fn find_upward(name: &str) -> Option<PathBuf> {
    let start = std::env::current_dir().ok()?;
    start
        .ancestors()
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

#[cfg(test)]
mod tests {
    use ordo_core::contract::config::{ENV_PREFIX, env_var_names, struct_fields};

    use super::*;

    /// ordo-core checks `[cli]` when it loads the file; the keys it accepts
    /// (listed when one is unknown) and their `ORDO_CLI_` variables are
    /// `CliConfig`'s fields, in its order.
    #[test]
    fn the_cli_table_core_checks_is_the_one_the_cli_declares() {
        let fields = struct_fields::<CliConfig>();
        let error = Config::from_toml_str("[cli]\nnot_a_key = 1\n").unwrap_err();
        let ConfigError::UnknownKey { valid, .. } = &error else {
            panic!("{error:?}")
        };
        assert_eq!(valid.as_slice(), fields);
        let prefix = format!("{ENV_PREFIX}CLI_");
        let vars: Vec<String> = env_var_names()
            .into_iter()
            .filter(|name| name.starts_with(&prefix))
            .collect();
        let expected: Vec<String> = fields
            .iter()
            .map(|field| format!("{prefix}{}", field.to_ascii_uppercase()))
            .collect();
        assert_eq!(vars, expected);
    }

    #[test]
    fn the_cli_table_is_read_after_the_layers() {
        let env =
            [("ORDO_CLI_WARN_PARTITIONS", "7")].map(|(name, value)| (name.to_owned(), value.to_owned()));
        let config = Config::load_with_env(None, env).unwrap();
        assert_eq!(CliConfig::from_config(&config).unwrap().warn_partitions, Some(7));
        assert_eq!(
            CliConfig::from_config(&Config::default())
                .unwrap()
                .warn_partitions,
            None
        );
    }
}

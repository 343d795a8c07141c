//! The configuration's layers: the file, then the environment (`ORDO_`
//! variables), then code; a bad setting names where it was set.

use crate::support;

use std::path::{Path, PathBuf};

use ordo_core::contract::config::{Origin, Partitions, env_var_names};
use ordo_core::{Config, ConfigError};
use support::chain;

/// A `domain.toml` with `text` in a directory of its own.
struct File {
    dir: PathBuf,
    path: PathBuf,
}

impl File {
    fn new(name: &str, text: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("ordo-layers-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("domain.toml");
        std::fs::write(&path, text).unwrap();
        Self { dir, path }
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect()
}

fn load(path: Option<&Path>, pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::load_with_env(path, env(pairs))
}

#[test]
fn the_environment_overrides_the_file_and_code_overrides_both() {
    let file = File::new(
        "override",
        "[server.partitioning]\nmax_retries = 5\nmax_concurrency = 8\n\n[categories.order]\npartitions = 4\n",
    );
    let config = load(
        Some(&file.path),
        &[
            ("ORDO_SERVER_PARTITIONING_MAX_RETRIES", "7"),
            ("ORDO_HEALTH_MAX_LAG", "12"),
        ],
    )
    .unwrap();
    assert_eq!(config.partitioning().max_retries(), 7, "the environment wins");
    assert_eq!(config.partitioning().max_concurrency(), 8, "the file's stays");
    assert_eq!(config.health().max_lag(), 12);
    assert_eq!(
        config.origin("server.partitioning.max_retries"),
        Some(Origin::Env {
            var: "ORDO_SERVER_PARTITIONING_MAX_RETRIES".to_owned()
        })
    );
    assert_eq!(
        config.origin("server.partitioning.max_concurrency"),
        Some(Origin::File {
            path: Some(file.path.clone()),
            line: 3
        })
    );
    assert_eq!(config.origin("server.partitioning.poll_interval_seconds"), None);
    // Code last.
    let config = config.with_partitions("order", Partitions::PerKey);
    assert_eq!(config.partitions("order"), Partitions::PerKey);
}

#[test]
fn named_tables_and_the_broker_s_keys_have_variables_too() {
    let config = load(
        None,
        &[
            ("ORDO_HANDLERS_OrderProjector_MAX_RETRIES", "9"),
            ("ORDO_CATEGORIES_order_PARTITIONS", "16"),
            ("ORDO_CATEGORIES_audit_PARTITIONS", "per_key"),
            ("ORDO_SERVER_PARTITIONING_LEASE_TTL_MS", "5000"),
            ("ORDO_REDIS_URL", "redis://10.0.0.5:6379/0"),
            ("ORDO_SERVER_PRIORITY_LANES_ENABLED", "true"),
        ],
    )
    .unwrap();
    assert_eq!(config.handlers()["OrderProjector"].max_retries(), Some(9));
    assert_eq!(
        config.partitions("order"),
        Partitions::Hashed(16.try_into().unwrap())
    );
    assert_eq!(config.partitions("audit"), Partitions::PerKey);
    assert!(config.priority_lanes().enabled());
    let broker = config.broker_partitioning(&["lease_ttl_ms"]).unwrap();
    assert_eq!(broker["lease_ttl_ms"].as_integer(), Some(5000));
    let redis = config.table("redis").expect("[redis] set by the environment");
    assert_eq!(redis["url"].as_str(), Some("redis://10.0.0.5:6379/0"));
}

#[test]
fn a_bad_value_names_the_variable_or_the_file_line_it_came_from() {
    let error = load(None, &[("ORDO_SERVER_PARTITIONING_MAX_RETRIES", "-1")]).unwrap_err();
    let text = chain(&error);
    assert!(
        text.contains("environment variable ORDO_SERVER_PARTITIONING_MAX_RETRIES")
            && text.contains("server.partitioning.max_retries must be between 0"),
        "{text}"
    );
    assert_eq!(error.key(), Some("server.partitioning.max_retries"));

    let error = load(None, &[("ORDO_HEALTH_MAX_LAG", "lots")]).unwrap_err();
    let text = chain(&error);
    assert!(
        text.contains("environment variable ORDO_HEALTH_MAX_LAG"),
        "{text}"
    );

    let file = File::new(
        "bad",
        "# retries\n[server.partitioning]\npoll_interval_seconds = 0.5\nmax_retries = -1\n",
    );
    let error = load(Some(&file.path), &[]).unwrap_err();
    assert_eq!(
        error.origin(),
        Some(&Origin::File {
            path: Some(file.path.clone()),
            line: 4
        }),
        "{}",
        chain(&error)
    );
    let text = chain(&error);
    assert!(text.contains(&format!("{}:4", file.path.display())), "{text}");

    // A typo in the file is named at its line, as one in a variable is named.
    let typo = File::new("typo", "[health]\nmax_lag = 1\nmax_lagg = 2\n");
    let error = load(Some(&typo.path), &[]).unwrap_err();
    assert!(
        matches!(error.innermost(), ConfigError::UnknownKey { .. }),
        "{error:?}"
    );
    assert!(chain(&error).contains(":3"), "{}", chain(&error));
}

#[test]
fn a_misspelled_variable_is_an_error_and_others_are_not_the_configuration_s() {
    let error = load(None, &[("ORDO_HEALTH_MAX_LAGG", "1")]).unwrap_err();
    let ConfigError::UnknownEnvVar { var, valid } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(var, "ORDO_HEALTH_MAX_LAGG");
    assert!(valid.contains(&"ORDO_HEALTH_MAX_LAG".to_owned()), "{valid:?}");
    // Variables of other tools, and empty values, are left alone.
    load(
        None,
        &[
            ("ORDO_REDIS_SERVER", "/usr/bin/redis-server"),
            ("ORDO_HARNESS_LOG", "debug"),
            ("ORDO_SERVER_PARTITIONING_MAX_RETRIES", ""),
        ],
    )
    .unwrap();
    // An unknown key of `[server.partitioning]` is the broker's to refuse,
    // named at its variable.
    let config = load(None, &[("ORDO_SERVER_PARTITIONING_LEASE_TTL", "5")]).unwrap();
    let error = config.locate(config.broker_partitioning(&["lease_ttl_ms"]).unwrap_err());
    assert!(
        chain(&error).contains("environment variable ORDO_SERVER_PARTITIONING_LEASE_TTL"),
        "{}",
        chain(&error)
    );
}

#[test]
fn ordo_config_names_the_file_when_code_names_none() {
    let file = File::new("named", "[server.partitioning]\nmax_retries = 2\n");
    let path = file.path.to_string_lossy().into_owned();
    let config = load(None, &[("ORDO_CONFIG", &path)]).unwrap();
    assert_eq!(config.partitioning().max_retries(), 2);
    // A path given in code wins over the variable.
    let other = File::new("code", "[server.partitioning]\nmax_retries = 1\n");
    let config = load(Some(&other.path), &[("ORDO_CONFIG", &path)]).unwrap();
    assert_eq!(config.partitioning().max_retries(), 1);
    // No file at all: the defaults, and the environment.
    assert_eq!(load(None, &[]).unwrap(), Config::default());
}

/// docs/OPERATIONS.md lists every variable of the configuration.
#[test]
fn every_variable_is_documented() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/OPERATIONS.md")).unwrap();
    let missing: Vec<String> = env_var_names()
        .into_iter()
        .filter(|name| !docs.contains(&format!("`{name}`")))
        .collect();
    assert!(missing.is_empty(), "not in docs/OPERATIONS.md: {missing:?}");
}

//! The Redis broker's keys of `[server.partitioning]` (`RedisSettings`):
//! defaults, validation, the cross-field rules, and unknown keys of the
//! table. No Redis is needed: the configuration is refused before any
//! connection.

use std::time::Duration;

use ordo_core::ConfigError;
use ordo_core::contract::config::Config;
use ordo_core::contract::error::error_chain;
use ordo_redis::{Error, ReapPolicy, RedisBroker, RedisSettings};

fn settings(text: &str) -> Result<RedisSettings, ConfigError> {
    let config = Config::from_toml_str(&format!("[server.partitioning]\n{text}"))?;
    RedisSettings::from_config(&config)
}

#[test]
fn defaults_match_the_contract() {
    for redis in [
        RedisSettings::default(),
        RedisSettings::from_config(&Config::default()).unwrap(),
        settings("").unwrap(),
    ] {
        assert_eq!(redis.lease_ttl(), Duration::from_millis(15_000));
        assert_eq!(redis.heartbeat_interval(), Duration::from_secs(3));
        assert_eq!(redis.reap_idle(), Some(Duration::from_millis(3_600_000)));
        assert_eq!(redis.discovery_interval(), Duration::from_secs(1));
        assert_eq!(redis.recheck_interval(), Duration::from_secs(5));
    }
}

#[test]
fn every_key_is_read_next_to_the_core_keys() {
    let config = Config::from_toml_str(
        "[server.partitioning]\n\
         lease_ttl_ms = 9000\n\
         heartbeat_interval_seconds = 2.5\n\
         poll_interval_seconds = 0.5\n\
         reap_idle_ms = 60000\n\
         discovery_interval_seconds = 2\n\
         recheck_interval_seconds = 0.25\n\
         max_retries = 0\n",
    )
    .unwrap();
    let redis = RedisSettings::from_config(&config).unwrap();
    assert_eq!(redis.lease_ttl(), Duration::from_secs(9));
    assert_eq!(redis.heartbeat_interval(), Duration::from_millis(2500));
    assert_eq!(redis.reap_idle(), Some(Duration::from_secs(60)));
    assert_eq!(redis.discovery_interval(), Duration::from_secs(2));
    assert_eq!(redis.recheck_interval(), Duration::from_millis(250));
    assert_eq!(config.partitioning().poll_interval(), Duration::from_millis(500));
    assert_eq!(config.partitioning().max_retries(), 0);
}

#[test]
fn the_heartbeat_default_follows_a_custom_ttl() {
    assert_eq!(
        settings("lease_ttl_ms = 3000").unwrap().heartbeat_interval(),
        Duration::from_millis(600)
    );
}

#[test]
fn reap_idle_ms_zero_means_never_reap() {
    let never = settings("reap_idle_ms = 0").unwrap();
    assert_eq!(never.reap_policy(), ReapPolicy::Never);
    assert_eq!(never.reap_idle(), None);
    let after = settings("reap_idle_ms = 500").unwrap();
    assert_eq!(after.reap_policy(), ReapPolicy::After(Duration::from_millis(500)));
    let negative = settings("reap_idle_ms = -1").unwrap_err();
    assert_eq!(negative.key(), Some("server.partitioning.reap_idle_ms"));
    assert!(negative.to_string().contains("0 (never reap)"), "{negative}");
}

#[test]
fn each_invalid_value_is_rejected_naming_its_key() {
    let cases = [
        (
            "lease_ttl_ms = 0",
            "server.partitioning.lease_ttl_ms",
            "greater than 0, got 0",
        ),
        ("lease_ttl_ms = -5", "server.partitioning.lease_ttl_ms", "got -5"),
        (
            "heartbeat_interval_seconds = 0",
            "server.partitioning.heartbeat_interval_seconds",
            "got 0",
        ),
        (
            "heartbeat_interval_seconds = -1.5",
            "server.partitioning.heartbeat_interval_seconds",
            "got -1.5",
        ),
        (
            "heartbeat_interval_seconds = nan",
            "server.partitioning.heartbeat_interval_seconds",
            "got NaN",
        ),
        (
            "heartbeat_interval_seconds = inf",
            "server.partitioning.heartbeat_interval_seconds",
            "got inf",
        ),
        (
            "heartbeat_interval_seconds = 6",
            "server.partitioning.heartbeat_interval_seconds",
            "a third",
        ),
        // 0 is "never reap" (above); a negative value is an error.
        ("reap_idle_ms = -5", "server.partitioning.reap_idle_ms", "got -5"),
        (
            "discovery_interval_seconds = 0",
            "server.partitioning.discovery_interval_seconds",
            "got 0",
        ),
        (
            "discovery_interval_seconds = 15",
            "server.partitioning.discovery_interval_seconds",
            "must be under the lease TTL",
        ),
        (
            "recheck_interval_seconds = 0",
            "server.partitioning.recheck_interval_seconds",
            "got 0",
        ),
        (
            "recheck_interval_seconds = -1",
            "server.partitioning.recheck_interval_seconds",
            "got -1",
        ),
    ];
    for (line, key, detail) in cases {
        let error = settings(line).unwrap_err();
        assert_eq!(error.key(), Some(key), "{line}: {error}");
        let message = error.to_string();
        assert!(
            message.starts_with(key) && message.contains(detail),
            "{line}: {message}"
        );
    }
}

#[test]
fn a_heartbeat_not_well_under_the_ttl_says_why() {
    let error = settings("lease_ttl_ms = 3000\nheartbeat_interval_seconds = 1.5").unwrap_err();
    assert_eq!(
        error.to_string(),
        "server.partitioning.heartbeat_interval_seconds must be well under the lease TTL (at most a third of \
         server.partitioning.lease_ttl_ms = 3000 ms, i.e. 1 s) so a live owner never lets its lease lapse, got 1.5"
    );
    let ok = settings("lease_ttl_ms = 3000\nheartbeat_interval_seconds = 1").unwrap();
    assert_eq!(ok.heartbeat_interval(), Duration::from_secs(1));
}

#[test]
fn a_discovery_interval_not_under_the_ttl_says_why() {
    let error = settings("lease_ttl_ms = 2000\ndiscovery_interval_seconds = 2").unwrap_err();
    assert_eq!(
        error.to_string(),
        "server.partitioning.discovery_interval_seconds must be under the lease TTL \
         (server.partitioning.lease_ttl_ms = 2000 ms): an instance announces itself once per discovery \
         interval and its announcement lives one TTL, got 2 s"
    );
    let ok = settings("lease_ttl_ms = 2000\ndiscovery_interval_seconds = 1.9").unwrap();
    assert_eq!(ok.discovery_interval(), Duration::from_millis(1900));
}

#[test]
fn an_unknown_key_of_the_table_is_rejected_listing_core_and_redis_keys() {
    for line in ["lease_ttl = 1", "lease_tll_ms = 6000"] {
        let error = settings(line).unwrap_err();
        assert!(matches!(error, ConfigError::UnknownKey { .. }), "{error:?}");
        let key = line.split(' ').next().unwrap();
        assert_eq!(
            error_chain(&error),
            format!(
                "unknown key `server.partitioning.{key}` in the domain configuration; valid keys in \
                 [server.partitioning]: poll_interval_seconds, max_retries, retry_backoff_initial_ms, \
                 retry_backoff_max_ms, max_concurrency, handler_timeout_ms, timeout_is_transient, \
                 max_transient_ms, pause_min_keys, lease_ttl_ms, heartbeat_interval_seconds, \
                 reap_idle_ms, discovery_interval_seconds, max_owned_partitions, recheck_interval_seconds"
            )
        );
    }
}

#[test]
fn a_value_of_the_wrong_type_is_named() {
    for (line, expected) in [
        (
            "lease_ttl_ms = \"soon\"",
            "`server.partitioning.lease_ttl_ms` in the domain configuration must be an integer, got a string",
        ),
        (
            "reap_idle_ms = 1.5",
            "`server.partitioning.reap_idle_ms` in the domain configuration must be an integer, got a float",
        ),
        (
            "heartbeat_interval_seconds = true",
            "`server.partitioning.heartbeat_interval_seconds` in the domain configuration must be a number, \
             got a boolean",
        ),
        (
            "[server.partitioning.lease_ttl_ms]\nx = 1",
            "`server.partitioning.lease_ttl_ms` in the domain configuration must be an integer, got a table",
        ),
    ] {
        let error = settings(line).unwrap_err();
        assert!(matches!(error, ConfigError::WrongType { .. }), "{error:?}");
        assert_eq!(error_chain(&error), expected);
    }
}

/// The builder checks the settings before it connects: the port here has no
/// Redis, and the error is the configuration's.
#[tokio::test]
async fn the_builder_refuses_invalid_settings_before_connecting() {
    for (line, key) in [
        (
            "lease_ttl_ms = 3000\nheartbeat_interval_seconds = 1.5",
            "server.partitioning.heartbeat_interval_seconds",
        ),
        ("lease_tll_ms = 3000", "server.partitioning.lease_tll_ms"),
    ] {
        let config = Config::from_toml_str(&format!("[server.partitioning]\n{line}")).unwrap();
        let error = RedisBroker::builder("redis://127.0.0.1:1")
            .config(config)
            .build()
            .await
            .unwrap_err();
        assert!(matches!(error, Error::DomainConfig(_)), "{line}: {error:?}");
        assert!(
            error_chain(&error).contains(key),
            "{line}: {}",
            error_chain(&error)
        );
    }
}

/// docs/domain.toml, the reference file, writes every key of the Redis
/// broker at its default.
#[test]
fn the_reference_file_states_the_brokers_keys_and_defaults() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/domain.toml");
    let config = Config::from_file(path).unwrap();
    assert_eq!(
        RedisSettings::from_config(&config).unwrap(),
        RedisSettings::default()
    );
    let text = std::fs::read_to_string(path).unwrap();
    let table: toml::Table = toml::from_str(&text).unwrap();
    let partitioning = table["server"]["partitioning"].as_table().unwrap();
    let missing: Vec<&str> = RedisSettings::keys()
        .iter()
        .copied()
        .filter(|key| !partitioning.contains_key(*key))
        .collect();
    assert!(missing.is_empty(), "not in docs/domain.toml: {missing:?}");
}

/// `[redis]` is read into `RedisConfig`, ordo-redis's declaration of it,
/// after the layers; the keys ordo-core checks in the file are its fields.
#[test]
fn the_redis_table_is_read_as_ordo_redis_declares_it() {
    let error = Config::from_toml_str("[redis]\nnot_a_key = 1\n").unwrap_err();
    let ConfigError::UnknownKey { valid, .. } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(valid.as_slice(), ordo_redis::RedisConfig::keys());
    let env = [
        ("ORDO_REDIS_URL", "redis://cache:6380"),
        ("ORDO_REDIS_TLS_CA_FILE", "ca.pem"),
    ]
    .map(|(name, value)| (name.to_owned(), value.to_owned()));
    let config = Config::load_with_env(None, env).unwrap();
    let redis = ordo_redis::RedisConfig::from_config(&config).unwrap();
    assert_eq!(redis.url(), Some("redis://cache:6380"));
    assert_eq!(redis.tls_ca_file(), Some(std::path::Path::new("ca.pem")));
    assert_eq!(redis.tls_cert_file(), None);
    assert_eq!(
        ordo_redis::RedisConfig::from_config(&Config::default()).unwrap(),
        ordo_redis::RedisConfig::default()
    );
}

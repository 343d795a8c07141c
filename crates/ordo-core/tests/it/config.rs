//! `domain.toml` parsing, defaults and validation.

use crate::support;

use std::time::Duration;

use ordo_core::contract::key::KeyRule;
use ordo_core::{Config, ConfigError};
use support::chain;

#[test]
fn defaults_match_the_contract() {
    for config in [Config::default(), Config::from_toml_str("").unwrap()] {
        let p = config.partitioning();
        assert_eq!(p.poll_interval(), Duration::from_millis(250));
        assert_eq!(p.max_retries(), 3);
        assert_eq!(p.backoff().initial(), Duration::from_millis(100));
        assert_eq!(p.backoff().max(), Duration::from_millis(5_000));
        assert_eq!(p.max_concurrency(), 64);
        assert_eq!(p.handler_timeout(), Some(Duration::from_secs(300)));
        assert!(!p.timeout_is_transient());
        assert_eq!(p.max_transient(), Some(Duration::from_secs(3600)));
        assert_eq!(p.pause_min_keys(), 3);
        assert!(!config.priority_lanes().enabled());
        assert_eq!(config.priority_lanes().backfill_suffix(), "backfill");
    }
}

#[test]
fn every_key_is_read() {
    let config = Config::from_toml_str(
        r#"
        [server.partitioning]
        poll_interval_seconds = 0.5
        max_retries = 0
        retry_backoff_initial_ms = 10
        retry_backoff_max_ms = 20
        max_concurrency = 8
        handler_timeout_ms = 0
        timeout_is_transient = true
        max_transient_ms = 5000
        pause_min_keys = 0

        [server.priority_lanes]
        enabled = true
        backfill_suffix = "slow"
        "#,
    )
    .unwrap();
    let p = config.partitioning();
    assert_eq!(p.poll_interval(), Duration::from_millis(500));
    assert_eq!(p.max_retries(), 0);
    assert_eq!(p.backoff().initial(), Duration::from_millis(10));
    assert_eq!(p.backoff().max(), Duration::from_millis(20));
    assert_eq!(p.max_concurrency(), 8);
    assert_eq!(p.handler_timeout(), None, "0: no timeout");
    assert!(p.timeout_is_transient());
    assert_eq!(p.max_transient(), Some(Duration::from_secs(5)));
    assert_eq!(p.pause_min_keys(), 0);
    assert!(config.priority_lanes().enabled());
    assert_eq!(config.priority_lanes().backfill_suffix(), "slow");
}

/// The Redis broker's keys are tested with it (ordo-redis tests/settings.rs);
/// this is the mechanism, with a made-up broker key.
#[test]
fn keys_core_does_not_read_are_kept_for_the_broker_that_declares_them() {
    let config = Config::from_toml_str(
        "[server.partitioning]\nmax_retries = 1\nbatch_ms = 20\nmode = \"fast\"\n[server.priority_lanes]\nenabled = true",
    )
    .unwrap();
    assert_eq!(config.partitioning().max_retries(), 1);
    let broker = config.broker_partitioning(&["mode", "batch_ms"]).unwrap();
    assert_eq!(
        broker
            .iter()
            .map(|(key, value)| (key.as_str(), value.to_string()))
            .collect::<Vec<_>>(),
        [("batch_ms", "20".to_owned()), ("mode", "\"fast\"".to_owned())]
    );
    // A broker that reads no `mode` does not get it unchecked.
    let error = config.broker_partitioning(&["batch_ms"]).unwrap_err();
    assert_eq!(
        chain(&error),
        "unknown key `server.partitioning.mode` in the domain configuration; valid keys in \
         [server.partitioning]: poll_interval_seconds, max_retries, retry_backoff_initial_ms, \
         retry_backoff_max_ms, max_concurrency, handler_timeout_ms, timeout_is_transient, \
         max_transient_ms, pause_min_keys, batch_ms"
    );
    // Core's own keys are never handed to a broker.
    assert!(Config::default().broker_partitioning(&[]).unwrap().is_empty());
    assert_eq!(
        config,
        Config::from_toml_str(
            "[server.partitioning]\nmax_retries = 1\nbatch_ms = 20\nmode = \"fast\"\n[server.priority_lanes]\nenabled = true"
        )
        .unwrap()
    );
    assert_ne!(
        config,
        Config::from_toml_str(
            "[server.partitioning]\nmax_retries = 1\nbatch_ms = 21\nmode = \"fast\"\n[server.priority_lanes]\nenabled = true"
        )
        .unwrap(),
        "a broker's keys are part of the configuration (a broker and its domain must agree on them)"
    );
}

#[test]
fn each_invalid_value_is_rejected_naming_its_key() {
    let cases = [
        (
            "poll_interval_seconds = 0",
            "server.partitioning.poll_interval_seconds",
            "got 0",
        ),
        (
            "poll_interval_seconds = -0.25",
            "server.partitioning.poll_interval_seconds",
            "got -0.25",
        ),
        ("max_retries = -1", "server.partitioning.max_retries", "got -1"),
        (
            "retry_backoff_initial_ms = 0",
            "server.partitioning.retry_backoff_initial_ms",
            "got 0",
        ),
        (
            "retry_backoff_max_ms = -1",
            "server.partitioning.retry_backoff_max_ms",
            "got -1",
        ),
        (
            "retry_backoff_max_ms = 50",
            "server.partitioning.retry_backoff_max_ms",
            "at least",
        ),
        (
            "max_concurrency = 0",
            "server.partitioning.max_concurrency",
            "got 0",
        ),
        (
            "handler_timeout_ms = -1",
            "server.partitioning.handler_timeout_ms",
            "0 (no limit) or more, got -1",
        ),
        (
            "max_transient_ms = -5",
            "server.partitioning.max_transient_ms",
            "got -5",
        ),
        (
            "pause_min_keys = -1",
            "server.partitioning.pause_min_keys",
            "got -1",
        ),
    ];
    for (line, key, detail) in cases {
        let error = Config::from_toml_str(&format!("[server.partitioning]\n{line}")).unwrap_err();
        assert_eq!(error.key(), Some(key), "{line}: {error}");
        let message = error.to_string();
        assert!(
            message.starts_with(key) && message.contains(detail),
            "{line}: {message}"
        );
    }
}

#[test]
fn an_invalid_backfill_suffix_is_rejected() {
    for (suffix, detail) in [
        ("", "must not be empty"),
        ("a:b", "':'"),
        ("dlq", "`dlq`"),
        ("__lane__", "`__name__`"),
        // The key rules forbid control characters in stream-name segments;
        // the suffix is one.
        ("slow\n", "control characters"),
        ("a\tb", "control characters"),
    ] {
        let error = Config::from_toml_str(&format!("[server.priority_lanes]\nbackfill_suffix = {suffix:?}"))
            .unwrap_err();
        assert_eq!(
            error.key(),
            Some("server.priority_lanes.backfill_suffix"),
            "{suffix:?}"
        );
        assert!(error.to_string().contains(detail), "{suffix:?}: {error}");
    }
    let long = "x".repeat(256);
    let error =
        Config::from_toml_str(&format!("[server.priority_lanes]\nbackfill_suffix = {long:?}")).unwrap_err();
    assert_eq!(error.key(), Some("server.priority_lanes.backfill_suffix"));
}

#[test]
fn unknown_keys_in_ordo_tables_are_rejected_naming_the_key() {
    for (table, key) in [("server.priority_lanes", "enable"), ("health", "max_lagg")] {
        let error = Config::from_toml_str(&format!("[{table}]\n{key} = 1")).unwrap_err();
        assert!(matches!(error, ConfigError::UnknownKey { .. }), "{error:?}");
        let text = chain(&error);
        assert!(text.contains(&format!("unknown key `{table}.{key}`")), "{text}");
    }
}

#[test]
fn a_value_of_the_wrong_type_is_rejected() {
    let error = Config::from_toml_str("[server.partitioning]\nmax_retries = \"soon\"").unwrap_err();
    assert!(matches!(error, ConfigError::Parse(_)), "{error:?}");
    assert!(chain(&error).contains("max_retries"), "{}", chain(&error));
    assert!(!chain(&error).contains("Raw"), "{}", chain(&error));
}

#[test]
fn unknown_keys_are_rejected_at_every_level_listing_the_valid_ones() {
    let cases = [
        (
            "[server.partioning]\nlease_ttl_ms = 6000",
            "unknown key `server.partioning` in the domain configuration; valid keys in [server]: \
             partitioning, priority_lanes",
        ),
        (
            "[servr.partitioning]\nlease_ttl_ms = 6000",
            "unknown key `servr` in the domain configuration; valid keys at the top level: server, handlers, health, outbox, commands, categories, redis, cli, relay",
        ),
        (
            "lease_ttl_ms = 6000",
            "unknown key `lease_ttl_ms` in the domain configuration; valid keys at the top level: \
             server, handlers, health, outbox, commands, categories, redis, cli, relay",
        ),
        (
            "[server]\nport = 8080",
            "unknown key `server.port` in the domain configuration; valid keys in [server]: \
             partitioning, priority_lanes",
        ),
        (
            "[redis]\nurll = \"redis://x\"",
            "unknown key `redis.urll` in the domain configuration; valid keys in [redis]: url, tls_ca_file, tls_cert_file, tls_key_file",
        ),
    ];
    for (text, expected) in cases {
        let error = Config::from_toml_str(text).unwrap_err();
        assert!(matches!(error, ConfigError::UnknownKey { .. }), "{error:?}");
        assert_eq!(chain(&error), expected);
    }
    // `[server.partitioning]` may hold a broker's keys: an unknown one there
    // is rejected where the broker's keys are known (below, and at
    // `Domain::init()`: tests/domain.rs), listing core's and the broker's.
    let config = Config::from_toml_str("[server.partitioning]\nmax_retry = 1").unwrap();
    let error = config.broker_partitioning(&[]).unwrap_err();
    assert!(matches!(error, ConfigError::UnknownKey { .. }), "{error:?}");
    assert_eq!(
        chain(&error),
        "unknown key `server.partitioning.max_retry` in the domain configuration; valid keys in \
         [server.partitioning]: poll_interval_seconds, max_retries, retry_backoff_initial_ms, \
         retry_backoff_max_ms, max_concurrency, handler_timeout_ms, timeout_is_transient, \
         max_transient_ms, pause_min_keys"
    );
}

#[test]
fn a_table_in_place_of_a_value_or_the_reverse_is_named_without_internal_types() {
    for (text, expected) in [
        (
            "[server]\npartitioning = 5",
            "`server.partitioning` in the domain configuration must be a table, got an integer",
        ),
        (
            "server = \"x\"",
            "`server` in the domain configuration must be a table, got a string",
        ),
        (
            "[server.partitioning.max_retries]\nx = 1",
            "`server.partitioning.max_retries` in the domain configuration must be a value, got a table",
        ),
    ] {
        let error = Config::from_toml_str(text).unwrap_err();
        let text = chain(&error);
        assert_eq!(text, expected);
        assert!(!text.contains("Raw"), "{text}");
    }
}

#[test]
fn the_tables_of_the_ordo_tool_are_accepted() {
    let config = Config::from_toml_str(
        "[redis]\nurl = \"rediss://127.0.0.1:6379/0\"\ntls_ca_file = \"ca.pem\"\ntls_cert_file = \"c.pem\"\ntls_key_file = \"c.key\"\n[cli]\nwarn_partitions = 5\n[server.partitioning]\nmax_retries = 6",
    )
    .unwrap();
    assert_eq!(config.partitioning().max_retries(), 6);
}

#[test]
fn from_file_reads_and_names_a_missing_file() {
    let dir = std::env::temp_dir().join(format!("ordo-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("domain.toml");
    std::fs::write(&path, "[server.priority_lanes]\nenabled = true\n").unwrap();
    assert!(Config::from_file(&path).unwrap().priority_lanes().enabled());

    let missing = dir.join("missing.toml");
    let error = Config::from_file(&missing).unwrap_err();
    assert!(matches!(error, ConfigError::Io { .. }), "{error:?}");
    assert!(error.to_string().contains("missing.toml"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn key_rules_reserve_the_configured_suffix() {
    let config = Config::from_toml_str("[server.priority_lanes]\nbackfill_suffix = \"slow\"").unwrap();
    let rules = config.key_rules();
    assert_eq!(
        rules.validate("client_id", Some("slow")).unwrap_err().rule,
        KeyRule::ReservedLaneToken
    );
    assert_eq!(rules.validate("client_id", Some("backfill")).unwrap(), "backfill");
}

#[test]
fn a_category_is_per_key_unless_its_table_gives_a_number_of_partitions() {
    use std::num::NonZeroU32;

    use ordo_core::Partitions;

    let config = Config::from_toml_str(
        "[categories.order]\npartitions = 256\n[categories.customer]\npartitions = \"per_key\"\n",
    )
    .unwrap();
    assert_eq!(
        config.partitions("order"),
        Partitions::Hashed(NonZeroU32::new(256).unwrap())
    );
    assert_eq!(config.partitions("customer"), Partitions::PerKey);
    assert_eq!(config.partitions("invoice"), Partitions::PerKey, "the default");
    assert_eq!(Config::default().partitions("order"), Partitions::PerKey);

    for (text, expected) in [
        (
            "partitions = 0",
            "categories.order.partitions must be between 1 and 65536, got 0",
        ),
        (
            "partitions = -3",
            "categories.order.partitions must be between 1 and 65536, got -3",
        ),
        (
            "partitions = 65537",
            "categories.order.partitions must be between 1 and 65536, got 65537",
        ),
        (
            "partitions = \"hashed\"",
            "categories.order.partitions must be \"per_key\" or a number of partitions, got \"hashed\"",
        ),
        (
            "partitions = 2.5",
            "categories.order.partitions must be \"per_key\" or a number of partitions, got a float",
        ),
        (
            "partition = 8",
            "unknown key `categories.order.partition` in the domain configuration; valid keys in \
             [categories.order]: partitions",
        ),
    ] {
        let error = Config::from_toml_str(&format!("[categories.order]\n{text}\n")).unwrap_err();
        assert_eq!(chain(&error), expected, "{text}");
    }
}

#[test]
fn a_parse_error_quoting_a_url_line_masks_its_password() {
    for text in [
        "[redis]\nurl = redis://app:s3cret@db:6379/0\n",
        "[redis]\nurl = \"redis://app:s3cret@db:6379/0\n",
        "[server.partitioning]\nmax_retries = \"redis://app:s3cret@db\"\n",
        "[redis]\nurl = \"postgres://h/db?password=s3cret\" x\n",
    ] {
        let error = Config::from_toml_str(text).unwrap_err();
        assert!(matches!(error, ConfigError::Parse(_)), "{error:?}");
        let (shown, debug) = (chain(&error), format!("{error:?}"));
        for output in [&shown, &debug] {
            assert!(!output.contains("s3cret"), "{text}: {output}");
        }
        assert!(shown.contains("***") && shown.contains("line 2"), "{shown}");
    }
}

/// docs/domain.toml, the reference file, is read by the real loader, and
/// its values are the defaults it says they are.
#[test]
fn the_reference_file_is_valid_and_states_the_defaults() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/domain.toml");
    let config = Config::from_file(path).unwrap_or_else(|error| panic!("{}", chain(&error)));
    let defaults = Config::default();
    assert_eq!(config.partitioning(), defaults.partitioning());
    assert_eq!(config.priority_lanes(), defaults.priority_lanes());
    assert_eq!(config.health(), defaults.health());
    assert_eq!(config.outbox(), defaults.outbox());
    assert_eq!(config.partitions("order"), defaults.partitions("order"));
    let handler = &config.handlers()["OrderProjector"];
    let p = defaults.partitioning();
    assert_eq!(handler.max_retries(), Some(p.max_retries()));
    assert_eq!(handler.backoff(), Some(p.backoff()));
    assert_eq!(handler.timeout(), Some(p.handler_timeout()));
    assert_eq!(handler.timeout_is_transient(), Some(p.timeout_is_transient()));
    assert_eq!(handler.max_transient(), Some(p.max_transient()));
    assert_eq!(handler.pause_min_keys(), Some(p.pause_min_keys()));
}
